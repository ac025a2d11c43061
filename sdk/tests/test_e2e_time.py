"""End to end: Timers, retries with backoff, method and heartbeat timeouts, failure routes
and generator handlers with heartbeat frames and Stream writes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from dex import FlowErrorType, FlowStatus

from tests.e2e_flows import time_flows
from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import Stack, e2e_stack, history, payload, unique_id
from tests.e2e_flows.time_flows import (
    HeartbeatOutcome,
    Recovered,
    RetryOutcome,
    RetryPlan,
    TimerOutcome,
    TimerPlan,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-time")) as running:
        yield running


async def test_sub_second_duration_timer(stack: Stack) -> None:
    flow_id = unique_id("timer")
    await stack.client.start_flow(time_flows.TIMER_FLOW, flow_id, TimerPlan(duration_s=0.4))
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    outcome = result.single_output(TimerOutcome)
    assert outcome.fired and outcome.fired_0
    assert 0.38 <= outcome.waited_s < 5.0


async def test_deadline_timer(stack: Stack) -> None:
    flow_id = unique_id("deadline")
    await stack.client.start_flow(time_flows.TIMER_FLOW, flow_id, TimerPlan(deadline_in_s=0.5))
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    outcome = result.single_output(TimerOutcome)
    assert outcome.fired
    assert 0.45 <= outcome.waited_s < 5.0


async def test_retries_with_exponential_backoff(stack: Stack) -> None:
    flow_id = unique_id("retry")
    plan = RetryPlan(tag=flow_id, fail_times=2, max_attempts=5)
    await stack.client.start_flow(time_flows.RETRY_FLOW, flow_id, plan)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    outcome = result.single_output(RetryOutcome)
    assert outcome.attempt == 3

    lines = [line.split() for line in read_log(stack.directory, flow_id)]
    assert [int(attempt) for attempt, _, _ in lines] == [1, 2, 3]
    times = [float(t) for _, t, _ in lines]
    # initial 0.2 s, coefficient 2: the gaps are at least 0.2 s and 0.4 s
    assert times[1] - times[0] >= 0.19
    assert times[2] - times[1] >= 0.38
    # first_attempt_at is the same for every attempt
    assert len({first for _, _, first in lines}) == 1
    assert abs(float(lines[0][2]) - outcome.first_attempt_at) < 1.0

    events = await history(stack.client, flow_id)
    flaky = [payload(e) for e in events if e.type == "StepExecuteCompleted"]
    assert flaky[-1]["context"]["finalAttempt"] == 3


async def test_exhausted_retries_without_a_route_fail_the_flow(stack: Stack) -> None:
    flow_id = unique_id("exhausted")
    await stack.client.start_flow(time_flows.EXHAUSTED_FLOW, flow_id, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.FAILED
    assert result.error_type is FlowErrorType.WORKER_API_FAILED
    # the handler's message alone; which execution failed, and how, is in the history
    assert result.error_message == "no route out"
    events = await history(stack.client, flow_id)
    failed = [payload(e) for e in events if e.type == "StepExecuteFailed"]
    assert len(failed) == 1  # one event per logical method, however many attempts
    assert failed[0]["context"]["finalAttempt"] == 2
    closed = [payload(e) for e in events if e.type == "FlowClosed"]
    assert closed[-1]["errorMessage"] == "no route out"
    assert closed[-1]["errorDetail"] == (
        "DoomedNoRoute-1 execute failed: RuntimeError: no route out"
    )


async def test_method_timeout_fails_the_attempt_and_retries(stack: Stack) -> None:
    flow_id = unique_id("method-timeout")
    await stack.client.start_flow(time_flows.METHOD_TIMEOUT_FLOW, flow_id, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(int) == 2
    assert read_log(stack.directory, flow_id) == ["start 1", "start 2"]


async def test_heartbeat_timeout_and_last_heartbeat_value(stack: Stack) -> None:
    flow_id = unique_id("hb-timeout")
    await stack.client.start_flow(time_flows.HEARTBEAT_TIMEOUT_FLOW, flow_id, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    outcome = result.single_output(HeartbeatOutcome)
    # attempt 2 ran 2 s (> the 1 s heartbeat timeout) and survived by heartbeating
    assert outcome.attempt == 2
    assert outcome.previous_checkpoint == "checkpoint-1"
    assert outcome.beats >= 10
    assert read_log(stack.directory, flow_id) == ["start 1", "start 2"]


async def test_execute_failure_route_gets_same_input_and_recovery_error(stack: Stack) -> None:
    flow_id = unique_id("route")
    await stack.client.start_flow(time_flows.EXECUTE_FAILURE_ROUTE_FLOW, flow_id, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    recovered = result.single_output(Recovered)
    assert recovered.input == flow_id
    assert recovered.error_type == "ValueError"
    assert "doomed attempt 2" in (recovered.detail or "")
    assert recovered.wait_for_failed is False
    assert read_log(stack.directory, flow_id) == ["doomed 1", "doomed 2", "recover"]


async def test_wait_for_failure_proceed_runs_execute_with_recovery_error(stack: Stack) -> None:
    flow_id = unique_id("proceed")
    await stack.client.start_flow(time_flows.WAIT_FOR_PROCEED_FLOW, flow_id, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    recovered = result.single_output(Recovered)
    assert recovered.wait_for_failed is True
    assert recovered.error_type == "KeyError"
    assert f"wait_for broke for {flow_id}" in (recovered.detail or "")
    events = await history(stack.client, flow_id)
    assert [e.type for e in events].count("StepWaitForFailed") == 1


async def test_generator_heartbeats_checkpoint_and_stream_frames(stack: Stack) -> None:
    flow_id = unique_id("gen")
    await stack.client.start_flow(time_flows.GENERATOR_FLOW, flow_id, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(str) == "gen-checkpoint|2"
    assert read_log(stack.directory, flow_id) == ["start 1", "start 2"]

    page = await stack.client.list_stream_messages(flow_id, time_flows.PROGRESS, page_size=10)
    assert [m.value for m in page.messages] == [f"tick {i}" for i in reversed(range(6))]
    assert {m.source for m in page.messages} == {"#GeneratorSteps-1"}
