"""Flows for crash tests: Worker SIGKILLs at file gates, server SIGKILL and restart.

Every Step appends ``"<step> <attempt> <pid>"`` to the log named by its input, so a test
counts exactly how often (and in which process) each Step ran. Gates are named
``"<input>-<step>"`` and live in the Worker child's ``DEX_TEST_GATE_DIR``.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from dex import (
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    Timer,
    Wait,
    rpc,
)

from tests.e2e_flows.common import append_log, async_context
from tests.support import FileGate


def _log(tag: str, step: str, context: Context) -> None:
    append_log(tag, f"{step} {context.attempt} {os.getpid()}")


def _gate(tag: str, step: str) -> FileGate:
    return FileGate.from_env(f"{tag}-{step}")


_FAST_RETRY = RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=5)

# --------------------------------------------------------------------------- Worker SIGKILL


class Before(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "before", context)
        return StepDecision.go_to(Middle, input)


class Middle(Step[str]):
    """Heartbeats (so the server saw output), then parks at a gate on attempt 1."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        _log(input, "middle", context)
        await context.heartbeat("alive")
        if context.attempt == 1:
            await _gate(input, "middle").async_pass_through()
        return StepDecision.go_to(After, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST_RETRY)


class After(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "after", context)
        return StepDecision.graceful_complete(input)


class KillMidExecute(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Before()).other_steps(Middle(), After())


class Silent(Step[str]):
    """Sends no frame at all; the first process to run it parks at a gate."""

    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "silent", context)
        gate = _gate(input, "silent")
        if gate.reached_count() == 0:
            gate.pass_through()
        return StepDecision.graceful_complete(context.attempt)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST_RETRY)


class SilentDeath(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Silent())


class Blocking(Step[str]):
    """Heartbeats, then blocks its Worker's event loop at a gate on attempt 1."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        _log(input, "blocking", context)
        await context.heartbeat()
        if context.attempt == 1:
            _gate(input, "blocking").pass_through()  # sync: the loop runs nothing meanwhile
        return StepDecision.graceful_complete(context.attempt)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST_RETRY)


class HeartbeatThenBlock(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Blocking())


class OnceOnly(Step[str]):
    """At-most-once: one attempt, durably started before its effect, then a gate."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        _log(input, "once-start", context)
        await context.heartbeat(durable=True)
        _log(input, "once-acked", context)
        await _gate(input, "once").async_pass_through()
        return StepDecision.graceful_complete("ran")

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(maximum_attempts=1)
        ).on_execute_failure_proceed_to(OnceFailed)


class OnceFailed(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "once-failed", context)
        error = context.recovery_error
        detail = "" if error is None else f"{error.error_type}: {error.detail}"
        return StepDecision.graceful_complete(f"recovered ({detail})")


class AtMostOnce(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(OnceOnly()).other_steps(OnceFailed())


# --------------------------------------------------------------------------- server SIGKILL

BELL = Channel("bell", str)


class DurableStart(Step[str]):
    """Routes by the tag's prefix: ``timer-…``, ``channel-…`` or ``steps-…``."""

    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "start", context)
        if input.startswith("timer-"):
            return StepDecision.go_to(TimerWait, input)
        if input.startswith("channel-"):
            return StepDecision.go_to(BellWait, input)
        return StepDecision.go_to(GatedStep, input)


class TimerWait(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        _log(input, "timer-wait", context)
        return Wait.until(Timer.by_duration(timedelta(seconds=2)))

    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "timer-fired", context)
        return StepDecision.graceful_complete(context.has_timer_fired())


class BellWait(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        _log(input, "bell-wait", context)
        return Wait.until(BELL.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "bell-rang", context)
        return StepDecision.graceful_complete(BELL.results(context)[0])


class GatedStep(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "gated", context)
        _gate(input, "gated").pass_through()
        return StepDecision.go_to(Final, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=_FAST_RETRY)


class Final(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        _log(input, "final", context)
        return StepDecision.graceful_complete("final")


class Durable(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(DurableStart()).other_steps(
            TimerWait(), BellWait(), GatedStep(), Final()
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(BELL)

    @rpc(is_transactional=True)
    def ring(self, context: Context, input: str) -> None:
        BELL.publish(context, input)


KILL_MID_EXECUTE = KillMidExecute()
SILENT_DEATH = SilentDeath()
HEARTBEAT_THEN_BLOCK = HeartbeatThenBlock()
AT_MOST_ONCE = AtMostOnce()
DURABLE = Durable()
FLOWS: list[Flow[Any]] = [
    KILL_MID_EXECUTE,
    SILENT_DEATH,
    HEARTBEAT_THEN_BLOCK,
    AT_MOST_ONCE,
    DURABLE,
]
