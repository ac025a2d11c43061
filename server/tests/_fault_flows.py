"""Flows and a Worker child for the store-outage tests.

``python -m tests._fault_flows ADDRESS`` runs an ``AsyncWorker`` on the server at
``ADDRESS``. Handlers append ``"<event> <flow_id> <attempt>"`` lines to the file named by
``DEX_FAULT_LOG`` (``ready`` once registered); a handler that waits for the test polls for
a file ``<DEX_FAULT_GATES>/<name>``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from datetime import timedelta

import dex
from dex import (
    AsyncContext,
    Context,
    Flow,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    Timer,
    Wait,
)
from dex.errors import DexServiceError

RETRY_AFTER_S = 5.0


def _append(line: str) -> None:
    fd = os.open(os.environ["DEX_FAULT_LOG"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def log(event: str, context: Context) -> None:
    _append(f"{event} {context.flow_id} {context.attempt}")


async def _gate(name: str) -> None:
    path = os.path.join(os.environ["DEX_FAULT_GATES"], name)
    while not os.path.exists(path):
        await asyncio.sleep(0.02)


class Nap(Step[None]):
    """A 1 s Timer, then done."""

    def wait_for(self, context: Context, input: None) -> Wait:
        log("napping", context)
        return Wait.until(Timer.by_duration(timedelta(seconds=1)))

    def execute(self, context: Context, input: None) -> StepDecision:
        log("woke", context)
        return StepDecision.graceful_complete("woke")


class Napper(Flow[None]):
    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Nap())


class Flaky(Step[None]):
    """Fails its first attempt; the retry comes ``RETRY_AFTER_S`` later."""

    def execute(self, context: Context, input: None) -> StepDecision:
        log("attempt", context)
        if context.attempt == 1:
            raise RuntimeError("first attempt fails")
        return StepDecision.graceful_complete(context.attempt)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(
                initial_interval=timedelta(seconds=RETRY_AFTER_S), maximum_attempts=3
            )
        )


class Retrier(Flow[None]):
    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Flaky())


class Vouch(Step[str]):
    """Asks for a durable start once gate ``<input>-go`` opens; returns what it was told."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        assert isinstance(ctx, AsyncContext)
        log("entered", ctx)
        await _gate(f"{input}-go")
        try:
            await ctx.heartbeat(durable=True)
            outcome = "acked"
        except DexServiceError as exc:
            outcome = exc.error_code
        log(f"heartbeat-{outcome}", ctx)
        await _gate(f"{input}-finish")
        return StepDecision.graceful_complete(outcome)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=1))


class Vouched(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Vouch())


class Linger(Step[str]):
    """Returns its result once gate ``<input>`` opens."""

    async def execute(self, context: Context, input: str) -> StepDecision:
        log("lingering", context)
        await _gate(input)
        log("lingered", context)
        return StepDecision.graceful_complete(context.attempt)


class Lingerer(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Linger())


NAPPER = Napper()
RETRIER = Retrier()
VOUCHED = Vouched()
LINGERER = Lingerer()


def registry() -> dex.Registry:
    return dex.Registry([NAPPER, RETRIER, VOUCHED, LINGERER], allow_async_handlers=True)


async def _main(address: str) -> None:
    worker = dex.AsyncWorker(
        registry(),
        options=dex.WorkerOptions(
            server_address=address, pull=dex.PullWorkerOptions(max_concurrent_tasks=16)
        ),
    )
    running = asyncio.create_task(worker.run())
    await worker.wait_pull_registered()
    _append("ready - -")
    await running


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1]))
