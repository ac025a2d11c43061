"""Flows whose scheduled Steps compute their Wait inline (``StepOptions.wait_for_inline``).

Each ``wait_for`` appends one line to the file its input names, so a test can count how
often the Worker ran it: once when the Wait went inline, twice when it fell back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex import (
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    Wait,
    rpc,
)

PING = Channel("inline_ping", str)
GATE = Channel("inline_gate", str)
INLINE = StepOptions(wait_for_inline=True)


def _count_call(path: str, how: str) -> None:
    with Path(path).open("a") as f:
        f.write(f"{how}\n")


class Schedule(Step[str]):
    """Schedules the Step the input names: ``<kind>|<count file>``."""

    def execute(self, context: Context, input: str) -> StepDecision:
        kind, path = input.split("|", 1)
        target: type[Step[Any]] = {
            "async": AsyncWaiter,
            "sync": SyncWaiter,
            "touchy": TouchyWaiter,
            "plain": PlainWaiter,
            "queued": Hold,
        }[kind]
        if kind == "plain":
            # the movement's options say inline: they replace the Step's own options
            return StepDecision.go_to_many(StepMovement.of(target, path, options=INLINE))
        return StepDecision.go_to(target, path)


class Hold(Step[str]):
    """Waits (dispatched as usual) for ``inline_gate``, then schedules an ``AsyncWaiter``."""

    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(GATE.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.go_to(AsyncWaiter, input)


class AsyncWaiter(Step[str]):
    """An async ``wait_for`` that uses only its input: it runs inline."""

    def get_step_options(self) -> StepOptions:
        return INLINE

    async def wait_for(self, context: Context, input: str) -> Wait:
        _count_call(input, "async")
        return Wait.until(PING.for_one())

    async def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(",".join(PING.results(context)))


class SyncWaiter(Step[str]):
    """A sync ``wait_for`` that uses only its input: it runs inline, on the executor."""

    def get_step_options(self) -> StepOptions:
        return INLINE

    def wait_for(self, context: Context, input: str) -> Wait:
        _count_call(input, "sync")
        return Wait.until(PING.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(",".join(PING.results(context)))


class TouchyWaiter(Step[str]):
    """Marked inline but reads its context: it falls back to a dispatched ``wait_for``."""

    def get_step_options(self) -> StepOptions:
        return INLINE

    async def wait_for(self, context: Context, input: str) -> Wait:
        _count_call(input, "touchy")
        if not context.flow_id:
            raise AssertionError("a dispatched wait_for knows its Flow")
        return Wait.until(PING.for_one())

    async def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(",".join(PING.results(context)))


class PlainWaiter(Step[str]):
    """Not inline by its own options; the movement's options make it so."""

    async def wait_for(self, context: Context, input: str) -> Wait:
        _count_call(input, "plain")
        return Wait.until(PING.for_one())

    async def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(",".join(PING.results(context)))


class InlineWaits(Flow[str]):
    """Schedule -> one waiter on ``inline_ping`` (or Hold -> one); RPCs publish to each."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Schedule()).other_steps(
            Hold(), AsyncWaiter(), SyncWaiter(), TouchyWaiter(), PlainWaiter()
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(PING, GATE)

    @rpc(is_transactional=True)
    def ping(self, context: Context, input: str) -> None:
        PING.publish(context, input)

    @rpc(is_transactional=True)
    def open_gate(self, context: Context) -> None:
        GATE.publish(context, "open")


INLINE_WAITS = InlineWaits()
FLOWS: list[Flow[Any]] = [INLINE_WAITS]
