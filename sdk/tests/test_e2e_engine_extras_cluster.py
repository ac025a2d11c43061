"""End to end on two servers sharing one PostgreSQL database: step waits and timeouts.

Run with ``DEX_TEST_DATABASE=postgres``; on SQLite (one server per database) it skips.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from dex import (
    AsyncClient,
    ClientOptions,
    FlowErrorType,
    FlowStatus,
    StartFlowOptions,
    StepExecutionId,
)
from dex._client._wait_options import WaitForStepCompletionOptions
from dex_server.testing import RunningServer, running_server, selected_database

from tests.e2e_flows import engine_flows
from tests.e2e_flows.engine_flows import GATE_FLOW, UNHANDLED_FLOW
from tests.e2e_flows.harness import history, unique_id, wait_for_phase
from tests.support import WorkerProcess

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(selected_database() != "postgres", reason="several servers need PostgreSQL"),
]

FACTORY = "tests.e2e_flows.engine_flows:registry"
REGISTRY = engine_flows.registry()


class Pair:
    def __init__(self, a: RunningServer, b: RunningServer) -> None:
        self.a, self.b = a, b
        self.client_b = AsyncClient(REGISTRY, options=ClientOptions(server_address=b.address))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Pair]:
    directory = tmp_path_factory.mktemp("e2e-engine-cluster")
    async with running_server(directory / "a", fsync=False) as a:
        b = RunningServer(directory / "b", {"database_url": a.database_url, "fsync": False})
        b.directory.mkdir(parents=True, exist_ok=True)
        await b.start()
        # the only Worker is on server A; the Client talks to server B
        worker = WorkerProcess(FACTORY, server_address=a.address)
        pair = Pair(a, b)
        try:
            await asyncio.to_thread(worker.start)
            yield pair
        finally:
            await pair.client_b.close()
            worker.close()
            await b.stop()


async def test_a_step_wait_on_one_server_sees_a_completion_on_another(pair: Pair) -> None:
    client = pair.client_b
    flow_id = unique_id("cluster-stepwait")
    await client.start_flow(GATE_FLOW, flow_id, 1)
    await wait_for_phase(client, flow_id, "Hold", timeout=30)
    options = WaitForStepCompletionOptions(internal_handler_timeout=timedelta(seconds=2))
    waiter = asyncio.create_task(
        client.wait_for_step_completion(flow_id, StepExecutionId("Hold"), options)
    )
    await client.invoke_rpc(GATE_FLOW.go, flow_id, 1)
    # Hold-1 runs and commits through server A, where the Worker is
    await asyncio.wait_for(waiter, 30)
    await wait_for_phase(client, flow_id, "After", timeout=30)
    await client.stop_flow(flow_id)


async def test_a_flow_timeout_fires_once_with_two_servers(pair: Pair) -> None:
    client = pair.client_b
    flow_id = unique_id("cluster-timeout")
    await client.start_flow(UNHANDLED_FLOW, flow_id, 1, StartFlowOptions(timeout=1.0))
    result = await client.wait_for_flow(flow_id, timeout=60)
    assert result.status is FlowStatus.FAILED
    assert result.error_type is FlowErrorType.FLOW_TIMEOUT
    fired = [e for e in await history(client, flow_id) if e.type == "FlowTimeoutFired"]
    assert len(fired) == 1
