from __future__ import annotations

import asyncio
import threading
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pytest
from dex import (
    AsyncContext,
    Attribute,
    BufferedTextStream,
    Channel,
    ChannelMap,
    Context,
    Flow,
    PersistenceSchema,
    Registry,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    StepOutput,
    Stream,
    Timer,
    Wait,
    heartbeat,
    rpc,
)
from dex._invoke import invoke
from dex._protocol import ConditionResultsWire, RecoveryErrorWire, TaskResult

from .unit_support import RecordingIO, decode, raw, task


@dataclass
class Job:
    name: str
    size: int


Count = Attribute("Count", int)
Inbox = Channel("Inbox", str)
Replies = ChannelMap("Replies", int)
Log = Stream("Log", str)
Seen: list[Any] = []


class Begin(Step[Job]):
    def wait_for(self, context: Context, input: Job) -> Wait:
        context.set_step_execution_local("picked", input.name)
        return Wait.any_of(Timer.by_duration(0.5), Inbox.for_one(), Replies.for_n("r1", 2))

    def execute(self, context: Context, input: Job) -> StepDecision:
        Seen.append(
            (
                context.step_execution_id,
                context.from_step_execution_id,
                context.attempt,
                context.first_attempt_at,
                context.has_timer_fired(),
                context.has_timer_fired(0),
                Inbox.results(context),
                Replies.results(context, "r1"),
                context.get_step_execution_local("picked", str),
                context.recovery_error,
                context.wait_for_method_failed(),
            )
        )
        Count.set(context, (Count.get(context) or 0) + input.size)
        return StepDecision.go_to_many(
            StepMovement.of(Gen, input.size),
            StepMovement.of(Gen, 2, options=StepOptions(heartbeat_timeout=3)),
        ).with_canceling_steps(Begin)


class Gen(Step[int]):
    def execute(self, context: Context, input: int) -> Generator[StepOutput, None, StepDecision]:
        Seen.append(context.get_last_heartbeat_value(int))
        yield heartbeat()
        yield heartbeat(input * 10)
        yield Log.write(context, "line")
        buf = Log.buffered_text(context, max_buffered_bytes=4)
        assert isinstance(buf, BufferedTextStream)
        assert buf.write("ab") == ()
        frames = buf.write("cd")
        assert len(frames) == 1
        yield from frames
        buf.write("tail")  # flushed automatically before the result (4 bytes -> flush now)
        buf.write("z")
        return StepDecision.graceful_complete({"n": input})


class AsyncStep(Step[None]):
    async def execute(self, context: AsyncContext, input: None) -> StepDecision:
        await context.heartbeat("ckpt")
        await context.heartbeat(durable=True)
        Log.write(context, "sent")
        buf = Log.buffered_text(context, flush_interval=60)
        buf.write("buffered")
        context.record_event("done", {"ok": True})
        return StepDecision.force_complete()


class Failing(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        Count.set(context, 99)
        raise RuntimeError(f"boom {input}")


class ReturnsJunk(Step[None]):
    def execute(self, context: Context, input: None) -> StepDecision:
        return "nope"  # type: ignore[return-value]


class Outsider(Step[None]):
    def execute(self, context: Context, input: None) -> StepDecision:
        return StepDecision.dead_end()


class GoesOutside(Step[None]):
    def execute(self, context: Context, input: None) -> StepDecision:
        Count.set(context, 1)
        return StepDecision.go_to(Outsider)


class BadMovementInput(Step[None]):
    def execute(self, context: Context, input: None) -> StepDecision:
        return StepDecision.go_to(Gen, "not an int")


class UndeclaredWait(Step[None]):
    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(Channel("Other", str).for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        return StepDecision.dead_end()


class SlowSync(Step[None]):
    started = threading.Event()

    def execute(self, context: Context, input: None) -> StepDecision:
        SlowSync.started.set()
        while not context.is_cancellation_requested():
            threading.Event().wait(0.01)
        Seen.append("noticed cancel")
        return StepDecision.dead_end()


class Demo(Flow[Job]):
    def get_steps(self) -> StepList[Job]:
        return StepList.start_step(Begin).other_steps(
            Gen,
            AsyncStep,
            Failing,
            ReturnsJunk,
            GoesOutside,
            BadMovementInput,
            UndeclaredWait,
            SlowSync,
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Count, Inbox, Replies, Log)

    @rpc(is_transactional=True)
    def push(self, context: Context, text: str) -> RPCResult[int]:
        Inbox.publish(context, text)
        Inbox.delete(context, "m-1")
        Count.delete(context)
        return RPCResult(
            Inbox.size(context), next_steps=(StepMovement.of(Gen, 1),), canceling_steps=(Begin,)
        )

    @rpc
    async def peek(self, context: AsyncContext) -> int | None:
        return Count.get(context)

    @rpc
    def stream_in_rpc(self, context: Context) -> None:
        Log.write(context, "x")

    @rpc
    async def heartbeat_in_rpc(self, context: AsyncContext) -> None:
        await context.heartbeat()


REGISTRY = Registry([Demo()], allow_async_handlers=True)


@pytest.fixture(autouse=True)
def _clear() -> None:
    Seen.clear()


async def run(t: Any, io: RecordingIO | None = None) -> TaskResult:
    return await invoke(REGISTRY, t, io or RecordingIO())


async def test_wait_for_returns_wait_and_locals() -> None:
    res = await run(task("wait_for", "Begin", input={"name": "j", "size": 2}))
    assert res.error is None and res.decision is None
    assert res.wait is not None and res.wait.mode == "any"
    assert [c.kind for c in res.wait.conditions] == ["timer", "channel", "channel"]
    assert res.wait.conditions[2].channel == "Replies/r1"
    assert decode(res.locals["picked"]) == "j"


async def test_execute_sees_context_and_condition_results() -> None:
    t = task(
        "execute",
        "Begin",
        input={"name": "j", "size": 2},
        attempt=3,
        first_attempt_at=1_700_000_000.0,
        attributes={"Count": raw(5)},
        locals={"picked": raw("j")},
        recovery_error=RecoveryErrorWire(detail="d", error_type="E"),
        wait_for_failed=True,
        condition_results=ConditionResultsWire(
            timers_fired=[False],
            channel_values=[[raw("hello")], [raw(1), raw(2)]],
            channel_names=["Inbox", "Replies/r1"],
        ),
    )
    res = await run(t)
    assert res.error is None, res.error
    (seen,) = Seen
    assert seen[:3] == ("Begin-1", "__start__", 3)
    assert seen[3] == datetime.fromtimestamp(1_700_000_000, UTC)
    assert seen[4:9] == (False, False, ["hello"], [1, 2], "j")
    assert seen[9].detail == "d" and seen[9].error_type == "E" and seen[10] is True
    assert {k: decode(v) for k, v in res.attribute_writes.items()} == {"Count": 7}
    assert res.decision is not None and res.decision.kind == "go_to"
    assert [(m.step_type, decode(m.input)) for m in res.decision.movements] == [
        ("Gen", 2),
        ("Gen", 2),
    ]
    assert res.decision.movements[1].options is not None
    assert res.decision.movements[1].options.heartbeat_timeout_s == 3
    assert res.decision.cancel_steps == ["Begin"]


async def test_generator_frames_are_forwarded_in_order() -> None:
    io = RecordingIO()
    res = await run(task("execute", "Gen", input=4, last_heartbeat_value=raw(7)), io)
    assert res.error is None, res.error
    assert Seen == [7]
    assert io.frames == [
        ("heartbeat", None, False, False),
        ("heartbeat", b"40", True, False),
        ("stream", "Log", b'"line"'),
        ("stream", "Log", b'"abcd"'),
        ("stream", "Log", b'"tail"'),
        ("stream", "Log", b'"z"'),
    ]
    assert res.decision is not None and decode(res.decision.output) == {"n": 4}


async def test_async_handler_heartbeats_streams_and_events() -> None:
    io = RecordingIO()
    io.ack.clear()
    running = asyncio.create_task(run(task("execute", "AsyncStep"), io))
    await asyncio.sleep(0)
    for _ in range(100):
        if io.frames:
            break
        await asyncio.sleep(0.001)
    assert io.frames == [("heartbeat", b'"ckpt"', True, False)]
    assert not running.done()  # durable heartbeat waits for the ack
    io.ack.set()
    res = await running
    assert res.error is None, res.error
    assert io.frames[1:] == [
        ("heartbeat", None, False, True),
        ("stream", "Log", b'"sent"'),
        ("stream", "Log", b'"buffered"'),
    ]
    assert [(e.name, decode(e.value)) for e in res.events] == [("done", {"ok": True})]
    assert res.decision is not None and res.decision.kind == "force_complete"


async def test_exception_becomes_error_and_discards_effects() -> None:
    res = await run(task("execute", "Failing", input=3))
    assert res.error is not None
    assert res.error.error_type == "RuntimeError" and res.error.message == "boom 3"
    assert res.error.stack is not None and "boom 3" in res.error.stack
    assert not res.error.non_retryable
    assert res.attribute_writes == {} and res.decision is None


@pytest.mark.parametrize(
    ("step", "fragment"),
    [
        ("ReturnsJunk", "must return a StepDecision"),
        ("GoesOutside", "is not a Step of Flow"),
        ("UndeclaredWait", "does not declare"),
    ],
)
async def test_invalid_results_are_non_retryable(step: str, fragment: str) -> None:
    kind = "wait_for" if step == "UndeclaredWait" else "execute"
    res = await run(task(kind, step))
    assert res.error is not None
    assert res.error.error_type == "InvalidStepResultError" and res.error.non_retryable
    assert fragment in res.error.message
    assert res.attribute_writes == {}


async def test_bad_input_and_bad_movement_input() -> None:
    res = await run(task("execute", "Gen", input="x"))
    assert res.error is not None and res.error.error_type == "ValueMappingError"
    res = await run(task("execute", "BadMovementInput"))
    assert res.error is not None and res.error.error_type == "ValueMappingError"


async def test_unknown_names_become_errors() -> None:
    for t in (
        task("execute", "Nope"),
        task("execute", "Gen", flow_type="Other", input=1),
        task("wait_for", "Gen", input=1),
        task("rpc", rpc_name="nope"),
    ):
        res = await run(t)
        assert res.error is not None and res.error.error_type == "DexError"


async def test_rpc_results_and_effects() -> None:
    t = task("rpc", rpc_name="push", input="hi", channel_sizes={"Inbox": 2})
    res = await run(t)
    assert res.error is None, res.error
    assert decode(res.rpc_output) == 2  # 2 pending + 1 staged publish - 1 staged delete
    assert [(p.channel, decode(p.value)) for p in res.publishes] == [("Inbox", "hi")]
    assert [(d.channel, d.message_id) for d in res.channel_deletes] == [("Inbox", "m-1")]
    assert res.attribute_writes == {"Count": None}
    assert [(m.step_type, decode(m.input)) for m in res.rpc_movements] == [("Gen", 1)]
    assert res.rpc_cancel_steps == ["Begin"]
    res = await run(task("rpc", rpc_name="peek", attributes={"Count": raw(4)}))
    assert decode(res.rpc_output) == 4


async def test_rpc_cannot_stream_or_heartbeat() -> None:
    for name in ("stream_in_rpc", "heartbeat_in_rpc"):
        res = await run(task("rpc", rpc_name=name))
        assert res.error is not None and "RPC" in res.error.message


async def test_step_cannot_delete_messages() -> None:
    class Deleter(Step[None]):
        def execute(self, context: Context, input: None) -> StepDecision:
            Inbox.delete(context, "m")
            return StepDecision.dead_end()

    class F(Flow[None]):
        def get_steps(self) -> StepList[None]:
            return StepList.start_step(Deleter)

        def get_persistence_schema(self) -> PersistenceSchema:
            return PersistenceSchema.of(Inbox)

    res = await invoke(Registry([F()]), task("execute", "Deleter", flow_type="F"), RecordingIO())
    assert res.error is not None and "only be deleted from an RPC" in res.error.message


async def test_cancellation_propagates_and_reaches_sync_handler() -> None:
    SlowSync.started.clear()
    running = asyncio.create_task(run(task("execute", "SlowSync")))
    await asyncio.to_thread(SlowSync.started.wait, 5)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    for _ in range(500):
        if Seen:
            break
        await asyncio.sleep(0.01)
    assert Seen == ["noticed cancel"]


async def test_is_cancellation_requested_reflects_io() -> None:
    class Check(Step[None]):
        def execute(self, context: Context, input: None) -> StepDecision:
            Seen.append(context.is_cancellation_requested())
            return StepDecision.dead_end()

    class F(Flow[None]):
        def get_steps(self) -> StepList[None]:
            return StepList.start_step(Check)

    reg = Registry([F()])
    await invoke(reg, task("execute", "Check", flow_type="F"), RecordingIO(cancelled=True))
    await invoke(reg, task("execute", "Check", flow_type="F"), RecordingIO())
    assert Seen == [True, False]
