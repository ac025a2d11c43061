"""End to end: wait_for_step_completion and skip_timer (real server, real Worker child)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from dex import AsyncClient, ClientOptions, FlowStatus, StepExecutionId, TimerId
from dex._client._wait_options import WaitForStepCompletionOptions
from dex.errors import (
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    RequestTimeoutError,
    StepExecutionNotFoundError,
    TimerNotFoundError,
    TimerNotPendingError,
)
from dex_server.testing import RunningServer, running_server

from tests.e2e_flows import engine_flows
from tests.e2e_flows.engine_flows import GATE_FLOW, TIMERS_FLOW, TimersSeen
from tests.e2e_flows.harness import unique_id, wait_for_phase
from tests.support import WorkerProcess

pytestmark = pytest.mark.asyncio(loop_scope="module")

FACTORY = "tests.e2e_flows.engine_flows:registry"
REGISTRY = engine_flows.registry()


class Stack:
    def __init__(self, server: RunningServer, client: AsyncClient) -> None:
        self.server = server
        self.client = client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    directory = tmp_path_factory.mktemp("e2e-engine-extras")
    async with running_server(directory / "server") as srv:
        worker = WorkerProcess(FACTORY, server_address=srv.address)
        client = AsyncClient(REGISTRY, options=ClientOptions(server_address=srv.address))
        try:
            await asyncio.to_thread(worker.start)
            yield Stack(srv, client)
        finally:
            await client.close()
            worker.close()


# --------------------------------------------------------------------------- step waits


async def test_wait_for_step_completion_returns_when_that_execution_ends(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("stepwait")
    await client.start_flow(GATE_FLOW, flow_id, 1)
    await wait_for_phase(client, flow_id, "Hold")
    # polls of one second each: the wait outlives several server long polls
    options = WaitForStepCompletionOptions(internal_handler_timeout=timedelta(seconds=1))
    waiter = asyncio.create_task(
        client.wait_for_step_completion(flow_id, StepExecutionId("Hold"), options)
    )
    done, _ = await asyncio.wait({waiter}, timeout=2.5)
    assert not done, "Hold-1 still waits for its message"
    await client.invoke_rpc(GATE_FLOW.go, flow_id, 10)
    await asyncio.wait_for(waiter, 20)
    # Hold-1 ended and After-1 is waiting now: the Flow itself is still running
    await wait_for_phase(client, flow_id, "After")
    assert (await client.describe_flow(flow_id)).status is FlowStatus.RUNNING
    # an execution that ended answers at once, also through the sync-style default options
    await asyncio.wait_for(client.wait_for_step_completion(flow_id, StepExecutionId("Hold")), 10)

    await client.invoke_rpc(GATE_FLOW.go, flow_id, 100)
    await asyncio.wait_for(client.wait_for_step_completion(flow_id, StepExecutionId("After")), 20)
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(int) == 111
    # a closed Flow's executions all ended
    await client.wait_for_step_completion(flow_id, StepExecutionId("After", 1))


async def test_wait_for_step_completion_errors(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("stepwait-err")
    await client.start_flow(GATE_FLOW, flow_id, 0)
    await wait_for_phase(client, flow_id, "Hold")
    with pytest.raises(StepExecutionNotFoundError) as info:
        await client.wait_for_step_completion(flow_id, StepExecutionId("Hold", 2))
    assert "Hold-2" in str(info.value)
    with pytest.raises(StepExecutionNotFoundError):
        await client.wait_for_step_completion(flow_id, StepExecutionId("NoSuchStep"))
    with pytest.raises(FlowNotFoundError):
        await client.wait_for_step_completion(unique_id("absent"), StepExecutionId("Hold"))
    with pytest.raises(ValueError, match="number >= 1"):
        await client.wait_for_step_completion(flow_id, StepExecutionId("Hold", 0))
    short = WaitForStepCompletionOptions(request_timeout=timedelta(seconds=0.5))
    with pytest.raises(RequestTimeoutError):
        await client.wait_for_step_completion(flow_id, StepExecutionId("Hold"), short)
    # none of it changed the Flow
    await wait_for_phase(client, flow_id, "Hold")
    await client.stop_flow(flow_id)


# --------------------------------------------------------------------------- skip_timer


async def test_skip_timer_by_id_and_index_in_an_all_of_wait(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("skip-all")
    await client.start_flow(TIMERS_FLOW, flow_id, "all")
    await wait_for_phase(client, flow_id, "LongTimers")
    step = StepExecutionId("LongTimers")
    await client.skip_timer(flow_id, step, TimerId.by_condition_id("a"))
    # one of two one-hour timers is due: the Wait still waits for the other
    await wait_for_phase(client, flow_id, "LongTimers")
    with pytest.raises(TimerNotPendingError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_id("a"))
    with pytest.raises(TimerNotFoundError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_id("zzz"))
    with pytest.raises(TimerNotFoundError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_index(2))
    with pytest.raises(StepExecutionNotFoundError):
        await client.skip_timer(flow_id, StepExecutionId("LongTimers", 2), TimerId("a"))
    await client.skip_timer(flow_id, step, TimerId.by_condition_index(1))
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(TimersSeen) == TimersSeen(fired=[True, True], messages=[])
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_index(0))


async def test_skip_timer_wins_an_any_of_over_a_channel(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("skip-any")
    await client.start_flow(TIMERS_FLOW, flow_id, "any")
    await wait_for_phase(client, flow_id, "LongTimers")
    step = StepExecutionId("LongTimers")
    # the Channel condition is not counted: the timer is index 0
    await client.skip_timer(flow_id, step, TimerId.by_condition_index(0))
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(TimersSeen) == TimersSeen(fired=[True], messages=[])
