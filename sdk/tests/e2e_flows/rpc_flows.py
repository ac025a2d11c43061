"""Flows for RPCs (plain, transactional, locks, scheduling), Streams and Channel fan-in."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from dex import (
    Attribute,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    Stream,
    Wait,
    rpc,
)

from tests.e2e_flows.common import append_log, async_context
from tests.support import FileGate

# --------------------------------------------------------------------------- RPCs

NOTES = Attribute("notes", str)
HITS = Attribute("hits", int)
WAKE = Channel("wake", str)


@dataclass(frozen=True, kw_only=True)
class Scheduled:
    input: str
    step_execution_id: str
    from_step_execution_id: str
    notes: str | None


class Idle(Step[None]):
    """The start Step: waits on ``wake``, then records what woke it and dead-ends."""

    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(WAKE.for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        NOTES.set(context, f"woken by {WAKE.results(context)[0]}")
        return StepDecision.dead_end()


class Work(Step[str]):
    """Scheduled by the ``schedule`` RPC; force-completes (Idle is still waiting)."""

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.force_complete(
            Scheduled(
                input=input,
                step_execution_id=context.step_execution_id or "",
                from_step_execution_id=context.from_step_execution_id or "",
                notes=NOTES.get(context),
            )
        )


class Parked(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(WAKE.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(f"parked {input} woke")


class RpcFlow(Flow[None]):
    """Driven by RPCs: reads, transactional writes, scheduling and cancelling Steps."""

    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Idle()).other_steps(Work(), Parked())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(NOTES, HITS, WAKE)

    @rpc
    def echo(self, context: Context, input: str) -> str:
        return f"echo {input} from {context.flow_id}"

    @rpc
    def read(self, context: Context) -> str | None:
        return NOTES.get(context)

    @rpc
    async def async_read(self, context: Context) -> int:
        await asyncio.sleep(0)
        return HITS.get(context) or 0

    @rpc(is_transactional=True)
    def hit(self, context: Context, input: str) -> RPCResult[int]:
        HITS.set(context, (HITS.get(context) or 0) + 1)
        WAKE.publish(context, input)
        return RPCResult(output=(HITS.get(context) or 0))

    @rpc(is_transactional=True)
    def schedule(self, context: Context, input: str) -> RPCResult[str]:
        NOTES.set(context, f"scheduled {input}")
        return RPCResult(output="scheduled", next_steps=(StepMovement.of(Work, input),))

    @rpc(name="park")
    def park_steps(self, context: Context, input: int) -> RPCResult[None]:
        return RPCResult(
            output=None, next_steps=tuple(StepMovement.of(Parked, str(i)) for i in range(input))
        )

    @rpc(is_transactional=True)
    def cancel_parked(self, context: Context) -> RPCResult[str]:
        return RPCResult(output="canceled", canceling_steps=(Parked,))

    @rpc
    def fail(self, context: Context, input: str) -> str:
        raise LookupError(f"rpc failed on purpose: {input}")


# --------------------------------------------------------------------------- locks

GUARD = Attribute("guard", int)


class HoldLock(Step[str]):
    """Holds the ``guard`` lock during execute until the gate ``<input>`` is released."""

    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(input, f"start {context.step_execution_id}")
        FileGate.from_env(f"{input}-{context.step_execution_id}").pass_through()
        GUARD.set(context, (GUARD.get(context) or 0) + 1)
        append_log(input, f"end {context.step_execution_id}")
        return StepDecision.dead_end()

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_lock_attributes=(GUARD.lock(),))


class LockFlow(Flow[str]):
    """The ``hold`` RPC schedules HoldLock Steps; ``bump`` needs the same lock."""

    def get_steps(self) -> StepList[str]:
        return StepList.without_start_step(HoldLock())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GUARD)

    @rpc
    def hold(self, context: Context, input: str) -> RPCResult[None]:
        return RPCResult(output=None, next_steps=(StepMovement.of(HoldLock, input),))

    @rpc(lock_attributes=(GUARD.lock(),))
    def bump(self, context: Context) -> int:
        GUARD.set(context, (GUARD.get(context) or 0) + 100)
        return GUARD.get(context) or 0

    @rpc
    def guard(self, context: Context) -> int:
        return GUARD.get(context) or 0


# --------------------------------------------------------------------------- streams

TEXT = Stream("text", str)


class Speak(Step[str]):
    """An async Step writing three Stream messages, then buffered text."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        for word in input.split():
            TEXT.write(context, word)
        buffered = TEXT.buffered_text(context)
        for chunk in ("buf", "fer", "ed"):
            buffered.write(chunk)
        return StepDecision.graceful_complete("spoke")


class StreamFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Speak())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(TEXT)


# --------------------------------------------------------------------------- fan-in


@dataclass(frozen=True, kw_only=True)
class Note:
    publisher: int
    seq: int


QUEUE = Channel("queue", Note)
SEEN = Attribute("seen", list[Note])


@dataclass(frozen=True, kw_only=True)
class DrainPlan:
    total: int
    batch: int


class Drain(Step[DrainPlan]):
    """Consumes ``for_n(batch)`` per execution, appends to ``seen``, loops until total."""

    def wait_for(self, context: Context, input: DrainPlan) -> Wait:
        return Wait.until(QUEUE.for_n(input.batch))

    def execute(self, context: Context, input: DrainPlan) -> StepDecision:
        batch = list(QUEUE.results(context))
        if len(batch) != input.batch:
            raise AssertionError(f"for_n({input.batch}) delivered {len(batch)}")
        seen = list(SEEN.get(context) or []) + batch
        SEEN.set(context, seen)
        if len(seen) >= input.total:
            return StepDecision.graceful_complete(seen)
        return StepDecision.go_to(Drain, input)


class FanInFlow(Flow[DrainPlan]):
    def get_steps(self) -> StepList[DrainPlan]:
        return StepList.start_step(Drain())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(QUEUE, SEEN)

    @rpc
    def send(self, context: Context, input: Note) -> None:
        QUEUE.publish(context, input)

    @rpc(is_transactional=True)
    def send_tx(self, context: Context, input: Note) -> None:
        QUEUE.publish(context, input)


RPC_FLOW = RpcFlow()
LOCK_FLOW = LockFlow()
STREAM_FLOW = StreamFlow()
FAN_IN_FLOW = FanInFlow()
FLOWS: list[Flow[Any]] = [RPC_FLOW, LOCK_FLOW, STREAM_FLOW, FAN_IN_FLOW]
