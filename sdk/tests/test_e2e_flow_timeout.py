"""End to end: a Flow's soft timeout and its policies (real server, real Worker child)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from dex import (
    AsyncClient,
    ClientOptions,
    FlowErrorType,
    FlowStatus,
    FlowTimeoutHandlerOptions,
    FlowTimeoutPolicy,
    RetryPolicy,
    StartFlowOptions,
    StepExecutionId,
    TimerId,
)
from dex.errors import BadRequestError, FlowNotFoundError, TimerNotPendingError
from dex_server.testing import RunningServer, running_server

from tests.e2e_flows import engine_flows
from tests.e2e_flows.engine_flows import (
    FAILING_HANDLER_FLOW,
    GATE_FLOW,
    HANDLED_FLOW,
    PATIENT_FLOW,
    UNHANDLED_FLOW,
    Rescue,
)
from tests.e2e_flows.harness import free_port, history, payload, unique_id, wait_for_phase
from tests.support import WorkerProcess

pytestmark = pytest.mark.asyncio(loop_scope="module")

FACTORY = "tests.e2e_flows.engine_flows:registry"
REGISTRY = engine_flows.registry()
HANDLER = "sys:timeout_handler"


class Stack:
    def __init__(self, server: RunningServer, client: AsyncClient) -> None:
        self.server = server
        self.client = client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    directory = tmp_path_factory.mktemp("e2e-flow-timeout")
    async with running_server(directory / "server") as srv:
        worker = WorkerProcess(FACTORY, server_address=srv.address)
        client = AsyncClient(REGISTRY, options=ClientOptions(server_address=srv.address))
        try:
            await asyncio.to_thread(worker.start)
            yield Stack(srv, client)
        finally:
            await client.close()
            worker.close()


async def _fired(client: AsyncClient, flow_id: str) -> dict[str, object]:
    (event,) = [e for e in await history(client, flow_id) if e.type == "FlowTimeoutFired"]
    return payload(event)


async def test_default_policy_without_a_handler_fails_the_flow(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("timeout-fail")
    started = time.time()
    await client.start_flow(UNHANDLED_FLOW, flow_id, 1, StartFlowOptions(timeout=1.0))
    info = await client.describe_flow(flow_id)
    assert info.timeout_at is not None
    assert started + 0.9 <= info.timeout_at.timestamp() <= time.time() + 1.1
    result = await client.wait_for_flow(flow_id, timeout=30)
    assert result.status is FlowStatus.FAILED
    assert result.error_type is FlowErrorType.FLOW_TIMEOUT
    assert "soft timeout of 1 s" in (result.error_message or "")
    fired = await _fired(client, flow_id)
    assert fired["policy"] == "fail"
    assert float(fired["firedAt"]) >= float(fired["deadline"])  # type: ignore[arg-type]


async def test_the_timeout_timer_is_an_active_step_and_skip_timer_fires_it(
    stack: Stack,
) -> None:
    client = stack.client
    flow_id = unique_id("timeout-cancel")
    options = StartFlowOptions(timeout=timedelta(hours=1), timeout_policy=FlowTimeoutPolicy.CANCEL)
    await client.start_flow(UNHANDLED_FLOW, flow_id, 1, options)
    await wait_for_phase(client, flow_id, "Park")
    (timer,) = await wait_for_phase(client, flow_id, HANDLER)
    assert timer.step_execution_id == f"{HANDLER}-1"
    await client.skip_timer(flow_id, StepExecutionId(HANDLER), TimerId.by_condition_index(0))
    result = await client.wait_for_flow(flow_id, timeout=30)
    assert result.status is FlowStatus.CANCELED
    fired = await _fired(client, flow_id)
    assert fired["policy"] == "cancel"
    # skipped: it fired long before its deadline
    assert float(fired["firedAt"]) < float(fired["deadline"]) - 3000  # type: ignore[arg-type]


async def test_a_flow_that_completes_first_is_not_held_open_by_its_timeout(
    stack: Stack,
) -> None:
    client = stack.client
    flow_id = unique_id("timeout-done")
    await client.start_flow(GATE_FLOW, flow_id, 1, StartFlowOptions(timeout=3600))
    await wait_for_phase(client, flow_id, "Hold")
    await client.invoke_rpc(GATE_FLOW.go, flow_id, 2)
    await wait_for_phase(client, flow_id, "After")
    await client.invoke_rpc(GATE_FLOW.go, flow_id, 3)
    result = await client.wait_for_flow(flow_id, timeout=30)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(int) == 6
    assert not [e for e in await history(client, flow_id) if e.type == "FlowTimeoutFired"]


async def test_the_handler_runs_once_and_its_decision_applies(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("timeout-handler")
    # DEFAULT resolves to HANDLER: the Flow overrides handle_timeout
    await client.start_flow(HANDLED_FLOW, flow_id, 1, StartFlowOptions(timeout=1.0))
    result = await client.wait_for_flow(flow_id, timeout=30)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == f"wrapped late after {HANDLER} {HANDLER}-1"
    events = await history(client, flow_id)
    assert (await _fired(client, flow_id))["policy"] == "handler"
    handled = [
        payload(e)["context"]
        for e in events
        if e.type == "StepExecuteCompleted"
        and payload(e)["context"]["stepExecutionId"] == f"{HANDLER}-1"
    ]
    assert len(handled) == 1 and handled[0]["stepType"] == HANDLER


async def test_a_failing_handler_takes_its_failure_route(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("timeout-route")
    handler = FlowTimeoutHandlerOptions(retry=RetryPolicy(maximum_attempts=1))
    options = StartFlowOptions(
        timeout=1.0,
        timeout_policy=FlowTimeoutPolicy.HANDLER,
        timeout_handler_options=handler.on_failure_proceed_to(Rescue),
    )
    await client.start_flow(FAILING_HANDLER_FLOW, flow_id, 1, options)
    result = await client.wait_for_flow(flow_id, timeout=30)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str).startswith("rescued from RuntimeError")


async def test_bad_timeouts_are_refused_and_start_nothing(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("timeout-bad")
    with pytest.raises(ValueError, match="timeout"):
        StartFlowOptions(timeout=-1)
    mixed = StartFlowOptions(
        timeout=60,
        timeout_policy=FlowTimeoutPolicy.FAIL,
        timeout_handler_options=FlowTimeoutHandlerOptions(),
    )
    with pytest.raises(BadRequestError, match="HANDLER policy only"):
        await client.start_flow(UNHANDLED_FLOW, flow_id, 1, mixed)
    with pytest.raises(BadRequestError, match="max_flow_timeout_s"):
        await client.start_flow(
            UNHANDLED_FLOW, flow_id, 1, StartFlowOptions(timeout=timedelta(days=365 * 200))
        )
    with pytest.raises(FlowNotFoundError):
        await client.describe_flow(flow_id)


async def test_a_handler_that_lets_the_flow_go_on_and_its_fired_timer(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("timeout-dead-end")
    await client.start_flow(PATIENT_FLOW, flow_id, 1, StartFlowOptions(timeout=3600))
    await wait_for_phase(client, flow_id, HANDLER)
    step = StepExecutionId(HANDLER)
    await client.skip_timer(flow_id, step, TimerId.by_condition_id(HANDLER))
    await asyncio.wait_for(client.wait_for_step_completion(flow_id, step), 30)
    # the handler returned dead_end(): the Flow goes on, its timer is spent
    assert (await client.describe_flow(flow_id)).status is FlowStatus.RUNNING
    with pytest.raises(TimerNotPendingError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_index(0))
    await wait_for_phase(client, flow_id, "Park")
    await client.stop_flow(flow_id)


# --------------------------------------------------------------------------- restart


async def test_a_flow_timeout_fires_after_a_server_restart(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    directory = tmp_path_factory.mktemp("e2e-flow-timeout-restart")
    # a fixed port: the Client and the Worker find the restarted server where it was
    async with running_server(directory / "server", port=free_port()) as srv:
        client = AsyncClient(REGISTRY, options=ClientOptions(server_address=srv.address))
        worker = WorkerProcess(FACTORY, server_address=srv.address)
        try:
            await asyncio.to_thread(worker.start)
            flow_id = unique_id("timeout-restart")
            await client.start_flow(UNHANDLED_FLOW, flow_id, 1, StartFlowOptions(timeout=3.0))
            await wait_for_phase(client, flow_id, "Park")
            # SIGKILL: nothing of the old process survives but the store
            srv.kill()
            killed_at = time.time()
            await srv.start()
            result = await client.wait_for_flow(flow_id, timeout=60)
            assert result.status is FlowStatus.FAILED
            assert result.error_type is FlowErrorType.FLOW_TIMEOUT
            fired = await _fired(client, flow_id)
            assert float(fired["firedAt"]) > killed_at  # type: ignore[arg-type]
        finally:
            await client.close()
            worker.close()
