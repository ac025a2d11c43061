"""End to end: Client calls written for the documented Dex API, against a real server and
a real Worker child (timedelta timeouts, positional options, health as a bool, None
inputs sent as null, only the registered Flow instance accepted)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from dex import (
    Client,
    ClientOptions,
    FlowConfig,
    FlowStatus,
    RetryPolicy,
    StartFlowOptions,
    StepDurability,
    StopFlowOptions,
    StopType,
    StreamMessage,
)
from dex.errors import (
    FeatureNotAvailableError,
    FlowDefinitionError,
    FlowNotFoundError,
    LongPollTimeoutError,
    WorkerInvocationError,
)

from tests.e2e_flows.harness import Stack, e2e_stack, registry, unique_id, wait_for_phase
from tests.e2e_flows.rpc_flows import RPC_FLOW, STREAM_FLOW, TEXT, RpcFlow
from tests.e2e_flows.step_flows import SEQUENTIAL

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-client")) as running:
        yield running


async def test_wait_for_flow_takes_a_timedelta(stack: Stack) -> None:
    flow_id = unique_id("td-wait")
    await stack.client.start_flow(RPC_FLOW, flow_id, None)
    await wait_for_phase(stack.client, flow_id, "Idle", "waiting")
    with pytest.raises(LongPollTimeoutError):
        await stack.client.wait_for_flow(flow_id, timedelta(milliseconds=300))
    await stack.client.stop_flow(flow_id, StopFlowOptions(StopType.TERMINATE, "done"))
    result = await stack.client.wait_for_flow(flow_id, timeout=timedelta(seconds=20))
    assert result.status is FlowStatus.TERMINATED and result.is_terminal


async def test_read_stream_takes_a_timedelta_and_pages_carry_next_page_token(
    stack: Stack,
) -> None:
    flow_id = unique_id("td-stream")
    with pytest.raises(LongPollTimeoutError):
        await stack.client.read_stream(flow_id, TEXT, "", timedelta(milliseconds=300))
    await stack.client.start_flow(STREAM_FLOW, flow_id, "one two")
    first = await stack.client.read_stream(flow_id, TEXT, "", timedelta(seconds=20))
    assert isinstance(first, StreamMessage) and first.value == "one"
    await stack.client.wait_for_flow(flow_id, timedelta(seconds=20))
    newest = await stack.client.list_stream_messages(flow_id, TEXT, 1)
    assert len(newest.messages) == 1 and newest.next_page_token
    older = await stack.client.list_stream_messages(
        flow_id, TEXT, 1000, before_page_token=newest.next_page_token
    )
    assert older.messages[-1].value == "one" and older.next_page_token == ""


async def test_health_check_is_true_against_a_healthy_server(stack: Stack) -> None:
    assert await stack.client.health_check() is True
    assert (await stack.client.get_health()).status == "ok"


async def test_invoke_rpc_sends_none_for_a_str_input_to_the_worker(stack: Stack) -> None:
    flow_id = unique_id("rpc-none")
    await stack.client.start_flow(RPC_FLOW, flow_id, None)
    # Not refused by the Client: the Worker decodes null as the RPC's str input and fails.
    with pytest.raises(WorkerInvocationError) as raised:
        await stack.client.invoke_rpc(RPC_FLOW.echo, flow_id, None)
    assert "ValueMappingError" in f"{raised.value} {raised.value.detail}"
    assert await stack.client.invoke_rpc(RPC_FLOW.echo, flow_id, "x") == f"echo x from {flow_id}"
    await stack.client.stop_flow(flow_id)


async def test_start_flow_refuses_another_instance_of_a_registered_flow(stack: Stack) -> None:
    flow_id = unique_id("other-instance")
    with pytest.raises(FlowDefinitionError, match="Flow instance is not registered"):
        await stack.client.start_flow(RpcFlow(), flow_id, None)
    with pytest.raises(FlowDefinitionError, match="RPC method is not registered"):
        await stack.client.invoke_rpc(RpcFlow().echo, flow_id, "x")
    with pytest.raises(FlowNotFoundError):
        await stack.client.describe_flow(flow_id)


async def test_start_options_of_features_not_run_yet_start_nothing(stack: Stack) -> None:
    flow_id = unique_id("not-yet")
    # the server refuses the start, because it does not run Flow retry policies
    with pytest.raises(FeatureNotAvailableError, match="Flow retries"):
        await stack.client.start_flow(
            SEQUENTIAL, flow_id, 1, StartFlowOptions(retry_policy=RetryPolicy(maximum_attempts=3))
        )
    with pytest.raises(FlowNotFoundError):
        await stack.client.describe_flow(flow_id)
    async_durability = StartFlowOptions(
        config_override=FlowConfig(step_durability=StepDurability.ASYNC)
    )
    await stack.client.start_flow(SEQUENTIAL, flow_id, 1, async_durability)
    result = await stack.client.wait_for_flow(flow_id, timedelta(seconds=30))
    assert result.status is FlowStatus.COMPLETED


async def test_sync_client_with_positional_options(stack: Stack) -> None:
    def use_sync_client() -> None:  # blocking calls, off the test's event loop
        with Client(registry(), None, ClientOptions(stack.server.address)) as client:
            assert client.health_check() is True
            flow_id = unique_id("sync-positional")
            client.start_flow(SEQUENTIAL, flow_id, 1)
            result = client.wait_for_flow(flow_id, timedelta(seconds=30))
            assert result.status is FlowStatus.COMPLETED
            assert client.describe_flow(flow_id).status is FlowStatus.COMPLETED

    await asyncio.to_thread(use_sync_client)
