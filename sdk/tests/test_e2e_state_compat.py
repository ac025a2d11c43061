"""End to end: the state handles called with the Dex model's names, on a real server.

``state_compat_flows`` passes ``context=``, ``instance=``, ``count=`` and ``condition_id=``
by keyword, builds its schema from ``attributes/channels/streams``, loads a ChannelMap
instance with ``load_messages``, locks with ``lock(instance=...)``, lists ChannelMap
instances (staged publishes included) and yields the frames of a ``BufferedTextStream``.
The Client loads and locks a map instance through ``RPCInvokeOptions`` with
``AttributeMapLoad`` / ``AttributeLock`` values.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from dex import AsyncClient, ClientOptions, FlowStatus, RPCInvokeOptions

from tests.e2e_flows.harness import Stack, e2e_stack, unique_id, wait_for_phase
from tests.e2e_flows.state_compat_flows import (
    NOTES,
    STATE_COMPAT_FLOW,
    TEXT,
    Instances,
    Post,
    registry,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

FACTORY = "tests.e2e_flows.state_compat_flows:registry"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-state-compat"), workers=0) as running:
        await running.start_worker(FACTORY)
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(stack: Stack) -> AsyncIterator[AsyncClient]:
    own = AsyncClient(registry(), options=ClientOptions(server_address=stack.server.address))
    try:
        yield own
    finally:
        await own.close()


async def test_state_calls_with_the_model_names_run_end_to_end(
    stack: Stack, client: AsyncClient
) -> None:
    flow_id = unique_id("state-compat")
    flow = STATE_COMPAT_FLOW
    await client.start_flow(flow, flow_id, 2)
    await wait_for_phase(client, flow_id, "Collect")

    # for_n(count=2, condition_id=...) consumes exactly two of the three queued messages
    for value in ("4", "5", "6"):
        await client.invoke_rpc(flow.post, flow_id, Post(value=value))
    await wait_for_phase(client, flow_id, "Drain")

    # the Client loads and locks one AttributeMap instance with the model's value types
    loads: tuple[Any, ...] = (NOTES.load(instance="sum"),)
    locks: tuple[Any, ...] = (NOTES.lock(instance="sum"),)
    options = RPCInvokeOptions(
        load_attribute_map_instances=loads, lock_attribute_map_instances=locks
    )
    assert await client.invoke_rpc(flow.read_note, flow_id, "sum", options=options) == "9"

    # ChannelMap instance listing counts the RPC's own staged publish; load_messages
    # delivers the pending messages of the one instance it names
    seen: Instances = await client.invoke_rpc(
        flow.post_and_list, flow_id, Post(value="o1", instance="other")
    )
    assert (seen.keys, seen.size, seen.pending) == (("other",), 1, [])
    seen = await client.invoke_rpc(flow.post_and_list, flow_id, Post(value="x", instance="zed"))
    assert (seen.keys, seen.size, seen.pending) == (("other", "zed"), 2, ["o1"])

    # for_range(instance, at_least=2) with no upper bound takes every queued message
    await client.invoke_rpc(flow.post, flow_id, Post(value="a", instance="inbox"))
    await client.invoke_rpc(flow.post, flow_id, Post(value="b", instance="inbox"))
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED, result
    assert result.single_output(tuple[int, str]) == (9, "a,b")

    # the sync BufferedTextStream flushed at 4 bytes ("abcd") and on flush() ("ef")
    page = await client.list_stream_messages(flow_id, TEXT, page_size=10)
    assert [m.value for m in reversed(page.messages)] == ["abcd", "ef"]
