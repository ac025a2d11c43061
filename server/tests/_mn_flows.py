"""Flows and a Worker child for the multi-server tests (PostgreSQL).

``python -m tests._mn_flows ADDRESS`` runs an ``AsyncWorker`` on the server at ``ADDRESS``;
handlers append ``"<event> <flow_id> <step_execution_id> <attempt> <pid>"`` lines to the
file named by ``DEX_MN_LOG`` so a test counts what ran where (``ready`` once registered).
With ``DEX_MN_HOLD=1`` every Begin on that Worker blocks forever after logging ``held`` (the
server a Flow starts on dispatches its Begin; a Timer may fire on any server).
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import dex
from dex import (
    AsyncContext,
    Attribute,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    Stream,
    Timer,
    Wait,
    rpc,
)

HOPS = 3
_LOG = os.environ.get("DEX_MN_LOG", "")
_HOLD = os.environ.get("DEX_MN_HOLD") == "1"


def log(event: str, context: Context) -> None:
    _append(
        f"{event} {context.flow_id} {context.step_execution_id} {context.attempt} {os.getpid()}"
    )


def _append(line: str) -> None:
    fd = os.open(_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


_FAST = RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=20)


class Begin(Step[int]):
    async def execute(self, context: Context, input: int) -> StepDecision:
        if _HOLD:
            # this Worker's server is about to be killed: keep the Flow in flight here
            log("held", context)
            await asyncio.Event().wait()
        log("begin", context)
        return StepDecision.go_to(Nap, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST)


class Nap(Step[int]):
    """A durable Timer: fires once, whichever server holds it."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(Timer.by_duration(timedelta(seconds=0.3)))

    def execute(self, context: Context, input: int) -> StepDecision:
        log("nap", context)
        return StepDecision.go_to(Once, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST, wait_for_retry=_FAST)


class Once(Step[int]):
    """Single attempt, durably started before its effect: at most once, ever."""

    async def execute(self, ctx: Context, input: int) -> StepDecision:
        assert isinstance(ctx, AsyncContext)
        await ctx.heartbeat(durable=True)
        log("once", ctx)
        await asyncio.sleep(0.2)
        return StepDecision.go_to(Hop, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(maximum_attempts=1)
        ).on_execute_failure_proceed_to(Rescue)


class Rescue(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        log("rescue", context)
        return StepDecision.go_to(Hop, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST)


class Hop(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        log("hop", context)
        if input + 1 >= HOPS:
            return StepDecision.graceful_complete(input + 1)
        return StepDecision.go_to(Hop, input + 1)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST)


class Relay(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Begin()).other_steps(Nap(), Once(), Rescue(), Hop())


BELL = Channel("bell", str)
NEWS = Stream("news", str)


class Listen(Step[None]):
    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(BELL.for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        log("rang", context)
        return StepDecision.graceful_complete(f"{BELL.results(context)[0]} {os.getpid()}")


class Bell(Flow[None]):
    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Listen())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(BELL, NEWS)

    @rpc(is_transactional=True)
    def ring(self, context: Context, input: str) -> str:
        BELL.publish(context, input)
        return f"rung by {os.getpid()}"


GUARD = Attribute("guard", int)


async def _gate(name: str) -> None:
    """Return once the test created the file ``<DEX_MN_GATES>/<name>``."""
    path = os.path.join(os.environ["DEX_MN_GATES"], name)
    while not os.path.exists(path):
        await asyncio.sleep(0.01)


class Latch(Step[str]):
    """Holds the ``guard`` lock until the gate named by its input opens, then adds 1."""

    async def execute(self, context: Context, input: str) -> StepDecision:
        log(f"latch-{input}", context)
        await _gate(input)
        GUARD.set(context, (GUARD.get(context) or 0) + 1)
        log(f"done-{input}", context)
        return StepDecision.dead_end()

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_lock_attributes=(GUARD.lock(),))


class Guarded(Flow[None]):
    """Latch Steps scheduled by an RPC, and RPCs that need the lock or the whole Flow."""

    def get_steps(self) -> StepList[None]:
        return StepList.without_start_step(Latch())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GUARD)

    @rpc
    def latch(self, context: Context, input: str) -> RPCResult[None]:
        return RPCResult(output=None, next_steps=(StepMovement.of(Latch, input),))

    @rpc(lock_attributes=(GUARD.lock(),))
    def bump(self, context: Context) -> int:
        GUARD.set(context, (GUARD.get(context) or 0) + 100)
        return GUARD.get(context) or 0

    @rpc(is_transactional=True)
    async def tally(self, context: Context, input: str) -> int:
        seen = GUARD.get(context) or 0
        _append(f"tally-{input} {context.flow_id} - - {os.getpid()}")
        await _gate(input)
        GUARD.set(context, seen + 1000)
        return seen

    @rpc
    def guard(self, context: Context) -> int:
        return GUARD.get(context) or 0


class Vouch(Step[str]):
    """Records a durable start once the gate named by its input opens."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        assert isinstance(ctx, AsyncContext)
        log("vouch", ctx)
        await _gate(input)
        await ctx.heartbeat(durable=True)
        log("vouched", ctx)
        return StepDecision.graceful_complete(input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=1))


class Vouched(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Vouch())


HELD = Attribute("held", int)


async def _own_gate(context: Context, name: str) -> None:
    """Wait for the gate ``<name>-<pid>``: the test releases each Worker's copy on its own."""
    await _gate(f"{name}-{os.getpid()}")


class Solo(Step[str]):
    """Single attempt: a durable start, then an effect that must happen at most once."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        assert isinstance(ctx, AsyncContext)
        log("solo", ctx)
        await _own_gate(ctx, input)
        await ctx.heartbeat(durable=True)
        log("effect", ctx)
        return StepDecision.graceful_complete(str(os.getpid()))

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=1))


class SoloFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Solo())


class Hold(Step[str]):
    """Holds the ``held`` lock until its gate opens; its result frees it."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        log("hold", ctx)
        await _own_gate(ctx, input)
        HELD.set(ctx, os.getpid())
        log("holddone", ctx)
        return StepDecision.graceful_complete(str(os.getpid()))

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST, execute_lock_attributes=(HELD.lock(),))


class HoldFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Hold())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(HELD)


STRIDES = 6


class Stride(Step[int]):
    """Half a second of work per Step: keeps Flows in flight long enough to be taken over."""

    async def execute(self, context: Context, input: int) -> StepDecision:
        log("stride", context)
        await asyncio.sleep(0.5)
        if input + 1 >= STRIDES:
            return StepDecision.go_to(Seal, input + 1)
        return StepDecision.go_to(Stride, input + 1)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST)


class Seal(Step[int]):
    async def execute(self, ctx: Context, input: int) -> StepDecision:
        assert isinstance(ctx, AsyncContext)
        await ctx.heartbeat(durable=True)
        log("sealed", ctx)
        return StepDecision.graceful_complete(input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=1))


class Pace(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Stride()).other_steps(Seal())


RELAY = Relay()
VOUCHED = Vouched()
SOLO = SoloFlow()
HOLD = HoldFlow()
PACE = Pace()
GUARDED = Guarded()
BELL_FLOW = Bell()


def registry() -> dex.Registry:
    return dex.Registry(
        [RELAY, BELL_FLOW, GUARDED, VOUCHED, SOLO, HOLD, PACE], allow_async_handlers=True
    )


async def _main(address: str) -> None:
    worker = dex.AsyncWorker(
        registry(),
        options=dex.WorkerOptions(
            server_address=address, pull=dex.PullWorkerOptions(max_concurrent_tasks=64)
        ),
    )
    running = asyncio.create_task(worker.run())
    await worker.wait_pull_registered()
    _append(f"ready - - - {os.getpid()}")
    await running


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
