"""Flows for the Worker-gap tests: Steps that run side by side, and Steps whose Worker dies.

Gates live in the Worker child's ``DEX_TEST_GATE_DIR``; each Step's input is its tag.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Any

from dex import Context, Flow, Registry, RetryPolicy, Step, StepDecision, StepList, StepOptions

from tests.e2e_flows.common import append_log, async_context
from tests.support import FileGate


class Together(Step[str]):
    """Marks gate ``<input>`` reached, then waits until gate ``<group>-go`` is released.

    The input is ``"<group>.<n>"``: the test releases the group only once every Step of
    it started, so the Steps must run at the same time.
    """

    async def execute(self, context: Context, input: str) -> StepDecision:
        group = input.partition(".")[0]
        FileGate.from_env(input).mark_reached()
        await FileGate.from_env(f"{group}-go").async_wait_for_release(timeout=120)
        return StepDecision.graceful_complete(input)


class Side(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Together())


class Unattended(Step[str]):
    """A single-attempt Step that sends no frame; its first run parks at a gate."""

    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(input, f"unattended {context.attempt} {os.getpid()}")
        gate = FileGate.from_env(f"{input}-unattended")
        if gate.reached_count() == 0:
            gate.pass_through()
        return StepDecision.graceful_complete(context.attempt)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=1))


class Once(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Unattended())


class ModelCall(Step[str]):
    """Like an agent's model call: heartbeats, and its first attempt parks at a gate."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        append_log(input, f"model {context.attempt} {os.getpid()}")
        await context.heartbeat("streaming")
        if context.attempt == 1:
            await FileGate.from_env(f"{input}-model").async_pass_through()
        return StepDecision.graceful_complete(context.attempt)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=2)
        )


class Turn(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(ModelCall())


class Overrun(Step[str]):
    """Attempt 1 outlives its 1 s timeout and, cancelled, takes 3 s more to clean up, so
    its Worker is still full when attempt 2 arrives."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        append_log(input, f"overrun {context.attempt} {os.getpid()}")
        if context.attempt == 1:
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                await asyncio.sleep(3.0)  # the scenario: a slow cleanup
                raise
        return StepDecision.graceful_complete(context.attempt)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_method_timeout=timedelta(seconds=1),
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=2),
        )


class Slow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Overrun())


class Quick(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(input)


class Brief(Step[str]):
    """Two attempts; no schedule-to-start timeout of its own."""

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=2)
        )


class Impatient(Flow[str]):
    """A Flow whose Steps wait at most 1 s for a Worker (no Worker serves it)."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Brief())

    def get_schedule_to_start_timeout(self) -> timedelta | float | None:
        return timedelta(seconds=1)


SIDE = Side()
ONCE = Once()
TURN = Turn()
IMPATIENT = Impatient()
SLOW = Slow()
SERVED: list[Flow[Any]] = [SIDE, ONCE, TURN, SLOW]


def registry() -> Registry:
    """What the Worker children serve (not ``IMPATIENT``)."""
    return Registry(SERVED, allow_async_handlers=True)


def client_registry() -> Registry:
    """What the test's Client starts: every Flow here."""
    return Registry([*SERVED, IMPATIENT], allow_async_handlers=True)
