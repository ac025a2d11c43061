"""Flows and a Worker child for the time-travel and continue-as-new tests.

``python -m tests._tt_flows ADDRESS`` runs an ``AsyncWorker`` on the server at ``ADDRESS``.
Handlers append ``"<event> <flow_id> <step_execution_id> <run_id>"`` lines to the file named
by ``DEX_TT_LOG`` (``ready`` once registered), so a test counts what ran, in which run.
"""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass

import dex
from dex import (
    AsyncContext,
    Attribute,
    AttributeIndex,
    Channel,
    Context,
    Flow,
    IndexType,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    Wait,
    rpc,
)


def log(event: str, context: Context) -> None:
    line = f"{event} {context.flow_id} {context.step_execution_id} {context.run_id}\n"
    fd = os.open(os.environ["DEX_TT_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


TRAIL = Attribute("trail", list[str])
CHARGED = Attribute("charged", int)
NOTE = Attribute("note", str, AttributeIndex(IndexType.KEYWORD, "TtNote"))
INBOX = Channel("inbox", str)


@dataclass
class Peek:
    trail: list[str]
    charged: int
    note: str | None


def _add(context: Context, what: str) -> None:
    TRAIL.set(context, [*(TRAIL.get(context) or []), what])


class Prepare(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        log("prepare", context)
        _add(context, "prepare")
        return StepDecision.go_to(Charge, input)


class Charge(Step[int]):
    """Single attempt: a write with an effect outside the Flow (counted by the log)."""

    async def execute(self, ctx: Context, input: int) -> StepDecision:
        assert isinstance(ctx, AsyncContext)
        await ctx.heartbeat(durable=True)
        log("charge", ctx)
        _add(ctx, "charge")
        CHARGED.set(ctx, (CHARGED.get(ctx) or 0) + input)
        return StepDecision.go_to(Await, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=1))


class Await(Step[int]):
    """Waits for one message of the inbox, then completes with it."""

    def wait_for(self, context: Context, input: int) -> Wait:
        log("await-wait", context)
        return Wait.until(INBOX.for_one())

    def execute(self, context: Context, input: int) -> StepDecision:
        log("await-exec", context)
        got = INBOX.results(context)[0]
        _add(context, f"got {got}")
        return StepDecision.graceful_complete(got)


class Order(Flow[int]):
    """Prepare → Charge (single attempt) → Await (a message sent by the ``send`` RPC)."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Prepare()).other_steps(Charge(), Await())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(TRAIL, CHARGED, NOTE, INBOX)

    @rpc
    def send(self, context: Context, input: str) -> str:
        INBOX.publish(context, input)
        NOTE.set(context, input)
        return input

    @rpc
    def peek(self, context: Context) -> Peek:
        return Peek(
            trail=TRAIL.get(context) or [],
            charged=CHARGED.get(context) or 0,
            note=NOTE.get(context),
        )


TOTAL = Attribute("total", int, AttributeIndex(IndexType.INT, "TtTotal"))
TICKS = Channel("ticks", int)


class Tick(Step[None]):
    """Forever: wait for a tick, add it to the total, wait again."""

    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(TICKS.for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        n = TICKS.results(context)[0]
        log(f"tick-{n}", context)
        TOTAL.set(context, (TOTAL.get(context) or 0) + n)
        return StepDecision.go_to(Tick)


class Counter(Flow[None]):
    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Tick())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(TOTAL, TICKS)

    @rpc
    def tick(self, context: Context, input: int) -> None:
        TICKS.publish(context, input)

    @rpc
    def total(self, context: Context) -> int:
        return TOTAL.get(context) or 0


class Hold(Step[None]):
    """Single attempt: a durable start, its effect, then it never finishes."""

    async def execute(self, ctx: Context, input: None) -> StepDecision:
        assert isinstance(ctx, AsyncContext)
        await ctx.heartbeat(durable=True)
        log("hold", ctx)
        await asyncio.Event().wait()
        return StepDecision.graceful_complete()

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=1))


class Holder(Flow[None]):
    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Hold())


ORDER = Order()
COUNTER = Counter()
HOLDER = Holder()


def registry() -> dex.Registry:
    return dex.Registry([ORDER, COUNTER, HOLDER], allow_async_handlers=True)


async def _main(address: str) -> None:
    worker = dex.AsyncWorker(
        registry(),
        options=dex.WorkerOptions(
            server_address=address, pull=dex.PullWorkerOptions(max_concurrent_tasks=16)
        ),
    )
    running = asyncio.create_task(worker.run())
    await worker.wait_pull_registered()
    line = f"ready - - {os.getpid()}\n"
    fd = os.open(os.environ["DEX_TT_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(fd, line.encode())
    os.close(fd)
    await running


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
