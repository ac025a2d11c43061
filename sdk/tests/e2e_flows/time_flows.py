"""Flows for Timers, retries, timeouts, heartbeats, failure routes and generator handlers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Generator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from dex import (
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    StepOutput,
    Stream,
    Timer,
    Wait,
    WaitForFailurePolicy,
    heartbeat,
)

from tests.e2e_flows.common import append_log, async_context

# --------------------------------------------------------------------------- timers


@dataclass(frozen=True, kw_only=True)
class TimerPlan:
    """``duration_s`` for a relative Timer, or ``deadline_in_s`` for ``Timer.at``."""

    duration_s: float | None = None
    deadline_in_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class TimerOutcome:
    waited_s: float
    fired: bool
    fired_0: bool


class Sleep(Step[TimerPlan]):
    def wait_for(self, context: Context, input: TimerPlan) -> Wait:
        context.set_step_execution_local("t0", time.time())
        if input.duration_s is not None:
            return Wait.until(Timer.by_duration(timedelta(seconds=input.duration_s)))
        assert input.deadline_in_s is not None
        fire_at = datetime.now(UTC) + timedelta(seconds=input.deadline_in_s)
        return Wait.until(Timer.at(fire_at, condition_id="deadline"))

    def execute(self, context: Context, input: TimerPlan) -> StepDecision:
        t0 = context.get_step_execution_local("t0", float)
        assert t0 is not None
        return StepDecision.graceful_complete(
            TimerOutcome(
                waited_s=time.time() - t0,
                fired=context.has_timer_fired(),
                fired_0=context.has_timer_fired(0),
            )
        )


class TimerFlow(Flow[TimerPlan]):
    def get_steps(self) -> StepList[TimerPlan]:
        return StepList.start_step(Sleep())


# --------------------------------------------------------------------------- retries


@dataclass(frozen=True, kw_only=True)
class RetryPlan:
    """``fail_times`` attempts raise; the log ``<tag>`` gets one line per attempt."""

    tag: str
    fail_times: int
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class RetryOutcome:
    attempt: int
    first_attempt_at: float


class Flaky(Step[RetryPlan]):
    def execute(self, context: Context, input: RetryPlan) -> StepDecision:
        first = context.first_attempt_at.timestamp()
        append_log(input.tag, f"{context.attempt} {time.time():.6f} {first:.3f}")
        if context.attempt <= input.fail_times:
            raise RuntimeError(f"flaky attempt {context.attempt}")
        return StepDecision.graceful_complete(
            RetryOutcome(attempt=context.attempt, first_attempt_at=first)
        )

    def get_step_options(self) -> StepOptions:
        # per-movement overrides set maximum_attempts; this is the type's default
        return StepOptions(execute_retry=_retry(5))


def _retry(max_attempts: int) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=0.2),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=1),
        maximum_attempts=max_attempts,
    )


class StartFlaky(Step[RetryPlan]):
    def execute(self, context: Context, input: RetryPlan) -> StepDecision:
        options = StepOptions(execute_retry=_retry(input.max_attempts))
        return StepDecision.go_to_many(StepMovement.of(Flaky, input, options=options))


class RetryFlow(Flow[RetryPlan]):
    def get_steps(self) -> StepList[RetryPlan]:
        return StepList.start_step(StartFlaky()).other_steps(Flaky())


# --------------------------------------------------------------------------- timeouts


class SlowFirstAttempt(Step[str]):
    """Attempt 1 outlives its 0.5 s method timeout; attempt 2 returns at once."""

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        append_log(input, f"start {context.attempt}")
        if context.attempt == 1:
            await asyncio.sleep(30)
        return StepDecision.graceful_complete(context.attempt)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_method_timeout=timedelta(seconds=0.5),
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1)),
        )


class MethodTimeoutFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(SlowFirstAttempt())


@dataclass(frozen=True, kw_only=True)
class HeartbeatOutcome:
    attempt: int
    previous_checkpoint: str | None
    beats: int


class GoesQuiet(Step[str]):
    """Attempt 1 heartbeats a checkpoint, then goes quiet past the 1 s heartbeat timeout.

    Attempt 2 runs for 2 s (twice the heartbeat timeout) but heartbeats every 0.1 s, so it
    survives and sees attempt 1's checkpoint. The timeout leaves ten heartbeats of margin:
    on a loaded machine a 0.6 s one saw a 0.5 s stall of the loop end attempt 2.
    """

    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        append_log(input, f"start {context.attempt}")
        if context.attempt == 1:
            await context.heartbeat("checkpoint-1")
            await asyncio.sleep(30)
        previous = (
            context.get_last_heartbeat_value(str) if context.has_last_heartbeat_value() else None
        )
        beats = 0
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            await context.heartbeat()
            beats += 1
            await asyncio.sleep(0.1)
        return StepDecision.graceful_complete(
            HeartbeatOutcome(attempt=context.attempt, previous_checkpoint=previous, beats=beats)
        )

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            heartbeat_timeout=timedelta(seconds=1),
            execute_method_timeout=timedelta(seconds=20),
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1)),
        )


class HeartbeatTimeoutFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(GoesQuiet())


# --------------------------------------------------------------------------- failure routes


@dataclass(frozen=True, kw_only=True)
class Recovered:
    input: str
    error_type: str | None
    detail: str | None
    wait_for_failed: bool
    attempt: int


def _recovered(context: Context, input: str) -> Recovered:
    error = context.recovery_error
    return Recovered(
        input=input,
        error_type=None if error is None else error.error_type,
        detail=None if error is None else error.detail,
        wait_for_failed=context.wait_for_method_failed(),
        attempt=context.attempt,
    )


class Doomed(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(input, f"doomed {context.attempt}")
        raise ValueError(f"doomed attempt {context.attempt}")

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.05), maximum_attempts=2)
        ).on_execute_failure_proceed_to(Recover)


class Recover(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(input, "recover")
        return StepDecision.graceful_complete(_recovered(context, input))


class ExecuteFailureRouteFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Doomed()).other_steps(Recover())


class BadWaitFor(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        raise KeyError(f"wait_for broke for {input}")

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(_recovered(context, input))

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            wait_for_retry=RetryPolicy(maximum_attempts=1),
            wait_for_failure=WaitForFailurePolicy.PROCEED,
        )


class WaitForProceedFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(BadWaitFor())


class DoomedNoRoute(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        raise RuntimeError("no route out")

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.05), maximum_attempts=2)
        )


class ExhaustedFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(DoomedNoRoute())


# --------------------------------------------------------------------------- generators

PROGRESS = Stream("progress", str)


class GeneratorSteps(Step[str]):
    """A sync generator: attempt 1 yields a checkpoint and fails; attempt 2 yields
    heartbeats for 1.2 s (twice its heartbeat timeout) and Stream writes, then returns."""

    def execute(self, context: Context, input: str) -> Generator[StepOutput, None, StepDecision]:
        append_log(input, f"start {context.attempt}")
        if context.attempt == 1:
            yield heartbeat("gen-checkpoint")
            raise RuntimeError("first generator attempt fails after its checkpoint")
        previous = context.get_last_heartbeat_value(str)
        for i in range(6):
            yield heartbeat()
            yield PROGRESS.write(context, f"tick {i}")
            time.sleep(0.2)
        return StepDecision.graceful_complete(f"{previous}|{context.attempt}")

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            heartbeat_timeout=timedelta(seconds=0.6),
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.05)),
        )


class GeneratorFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(GeneratorSteps())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(PROGRESS)


TIMER_FLOW = TimerFlow()
RETRY_FLOW = RetryFlow()
METHOD_TIMEOUT_FLOW = MethodTimeoutFlow()
HEARTBEAT_TIMEOUT_FLOW = HeartbeatTimeoutFlow()
EXECUTE_FAILURE_ROUTE_FLOW = ExecuteFailureRouteFlow()
WAIT_FOR_PROCEED_FLOW = WaitForProceedFlow()
EXHAUSTED_FLOW = ExhaustedFlow()
GENERATOR_FLOW = GeneratorFlow()
SYNC_FLOWS: list[Flow[Any]] = [
    TIMER_FLOW,
    RETRY_FLOW,
    EXECUTE_FAILURE_ROUTE_FLOW,
    WAIT_FOR_PROCEED_FLOW,
    EXHAUSTED_FLOW,
    GENERATOR_FLOW,
]
ASYNC_FLOWS: list[Flow[Any]] = [METHOD_TIMEOUT_FLOW, HEARTBEAT_TIMEOUT_FLOW]
