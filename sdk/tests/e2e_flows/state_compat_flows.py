"""A Flow that uses the state handles with the Dex model's parameter names and shapes.

Every call passes ``context=`` / ``instance=`` / ``count=`` / ``condition_id=`` by keyword
where the model names them, the schema is built from its three groups, ChannelMap
instances are loaded with ``load_messages`` and buffered text goes through the sync
``BufferedTextStream``. The Worker child loads ``registry`` below.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass

from dex import (
    Attribute,
    AttributeMap,
    BufferedTextStream,
    Channel,
    ChannelMap,
    Context,
    Flow,
    PersistenceSchema,
    Registry,
    Step,
    StepDecision,
    StepList,
    StepOutput,
    Stream,
    Wait,
    rpc,
)

TOTAL = Attribute("total", int)
NOTES = AttributeMap("notes", str)
QUEUE = Channel("queue", int)
MAILBOXES = ChannelMap("mailboxes", str)
TEXT = Stream("text", str, 64 * 1024)


class Collect(Step[int]):
    """Waits for ``input`` queue messages; stores their sum in ``total`` and ``notes/sum``."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(QUEUE.for_n(count=input, condition_id="batch"))

    def execute(self, context: Context, input: int) -> StepDecision:
        values = QUEUE.results(context=context)
        TOTAL.set(context=context, value=sum(values))
        NOTES.set(context=context, instance="sum", value=str(sum(values)))
        return StepDecision.go_to(Drain, input)


class Drain(Step[int]):
    """Waits for at least 2 messages on ``mailboxes/inbox`` (no upper bound)."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(MAILBOXES.for_range("inbox", at_least=2))

    def execute(self, context: Context, input: int) -> StepDecision:
        drained = MAILBOXES.results(context=context, instance="inbox")
        NOTES.set(context, "drained", ",".join(drained))
        return StepDecision.go_to(Speak, ",".join(drained))


class Speak(Step[str]):
    """A sync generator writing buffered text: it yields the frames ``write`` returns."""

    def execute(self, context: Context, input: str) -> Generator[StepOutput, None, StepDecision]:
        buffered = TEXT.buffered_text(context=context, max_buffered_bytes=4)
        assert isinstance(buffered, BufferedTextStream)
        for chunk in ("ab", "cd", "ef"):
            yield from buffered.write(chunk)
        yield from buffered.flush()
        return StepDecision.graceful_complete((TOTAL.get(context=context) or 0, input))


@dataclass(frozen=True, kw_only=True)
class Post:
    """One message for ``queue`` (``instance`` None) or for a ``mailboxes`` instance."""

    value: str
    instance: str | None = None


@dataclass(frozen=True, kw_only=True)
class Instances:
    """What ``StateCompatFlow.post_and_list`` saw."""

    keys: tuple[str, ...]
    size: int
    pending: list[str]


class StateCompatFlow(Flow[int]):
    """Collect -> Drain -> Speak, driven by ``post`` RPCs."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Collect()).other_steps(Drain(), Speak())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema(
            attributes=(TOTAL, NOTES), channels=(QUEUE, MAILBOXES), streams=(TEXT,)
        )

    @rpc
    def post(self, context: Context, message: Post) -> None:
        if message.instance is None:
            QUEUE.publish(context=context, value=int(message.value))
        else:
            MAILBOXES.publish(context=context, instance=message.instance, value=message.value)

    @rpc(load_channel_map_instances=(MAILBOXES.load_messages("other"),))
    def post_and_list(self, context: Context, message: Post) -> Instances:
        """Publishes, then lists the non-empty instances (the staged publish counts)."""
        assert message.instance is not None
        MAILBOXES.publish(context, message.instance, message.value)
        pending = MAILBOXES.pending_messages(context=context, instance="other")
        return Instances(
            keys=MAILBOXES.get_all_instance_keys(context=context),
            size=MAILBOXES.get_map_size(context=context),
            pending=[m.value for m in pending],
        )

    @rpc(lock_attributes=(NOTES.lock(instance="sum"),))
    def read_note(self, context: Context, instance: str) -> str | None:
        """Reads one note; the caller loads it with ``RPCInvokeOptions``."""
        return NOTES.get(context=context, instance=instance)


STATE_COMPAT_FLOW = StateCompatFlow()


def registry() -> Registry:
    """The Worker children's and the Client's registry."""
    return Registry([STATE_COMPAT_FLOW])
