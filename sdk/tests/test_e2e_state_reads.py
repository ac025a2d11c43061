"""End to end: on-demand state reads (``AttributeMap.load_range`` / ``load_keys``) by
running async Step methods and RPCs, through a real server and Worker child."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from dex import FlowStatus

from tests.e2e_flows.harness import Stack, e2e_stack, unique_id
from tests.e2e_flows.read_flows import BIG, READ_FLOW

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-reads")) as running:
        yield running


async def test_step_reads_ranges_and_keys_of_committed_state(stack: Stack) -> None:
    flow_id = unique_id("reads")
    await stack.client.start_flow(READ_FLOW, flow_id, 8)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED, result
    assert result.single_output(int) == 3

    notes = await stack.client.invoke_rpc(READ_FLOW.notes, flow_id)
    assert notes == {
        "before_load": "'not-loaded'",
        # committed values, not the staged write; entry 3 came back through the blob cache
        "range": repr([("0002", 2, 2), ("0003", 3, len(BIG)), ("0004", 4, 2)]),
        "get_staged": "Entry(seq=2, text='staged')",
        "get_loaded": "Entry(seq=4, text='t4')",
        "head": "['0001', '0002']",
        "tail": "['0007', '0008']",
        "shared": "True",  # a frozen value is decoded once per Worker
        "keys": "{'0001': 1, '9999': None}",
        "get_unset": "None",
        "unloaded": "'not-loaded'",
    }


async def test_rpc_reads_a_page_on_demand(stack: Stack) -> None:
    flow_id = unique_id("page")
    await stack.client.start_flow(READ_FLOW, flow_id, 6)
    await stack.client.wait_for_flow(flow_id, timeout=20)
    assert await stack.client.invoke_rpc(READ_FLOW.page, flow_id, "0002") == [2, 3, 4]
    assert await stack.client.invoke_rpc(READ_FLOW.page, flow_id, "0005") == [5, 6]
    assert await stack.client.invoke_rpc(READ_FLOW.page, flow_id, "0100") == []
