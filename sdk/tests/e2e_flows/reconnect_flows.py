"""Flows for Worker-connection blips: a TCP proxy between the Worker and the server cuts it.

Every Step appends ``"<step> <attempt> <event>"`` to the log named by its input, so a test
sees exactly which attempts ran, finished or were cancelled. Gates are ``"<input>-work"``.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from dex import (
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    Stream,
)

from tests.e2e_flows.common import append_log, async_context
from tests.support import FileGate

NOTES = Stream("notes", str)


class Work(Step[str]):
    """Heartbeats durably (the server has seen a frame before a test cuts the connection;
    a plain heartbeat may still be on its way), parks at a gate on attempt 1, writes its
    attempt to the ``notes`` Stream, then records a durable heartbeat before it ends (not
    for an input starting with ``quick-``)."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        append_log(input, f"work {context.attempt} start")
        try:
            await context.heartbeat("alive", durable=True)
            if context.attempt == 1:
                await FileGate.from_env(f"{input}-work").async_pass_through()
            NOTES.write(context, f"attempt {context.attempt}")
            if not input.startswith("quick-"):
                await context.heartbeat(durable=True)
        except asyncio.CancelledError:
            append_log(input, f"work {context.attempt} cancelled")
            raise
        append_log(input, f"work {context.attempt} end")
        return StepDecision.go_to(Done, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=5)
        )


class Done(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(input, f"done {context.attempt} end")
        return StepDecision.graceful_complete(input)


class Blip(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Work()).other_steps(Done())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(NOTES)


BLIP = Blip()
FLOWS: list[Flow[Any]] = [BLIP]
