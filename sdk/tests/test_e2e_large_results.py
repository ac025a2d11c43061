"""End to end: Step results of many MiB, within and beyond the documented limits.

A result is one WebSocket frame. Within the limits (each value under the value limit, the
Flow's state under its limit) it commits, once; beyond them the attempt fails with
``LIMIT_EXCEEDED`` naming the limit. Never a closed connection, never a redelivery loop.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from dex import AsyncClient, ClientOptions, FlowStatus

from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import Stack, e2e_stack, unique_id
from tests.e2e_flows.large_flows import COMPANION, FILLER, FillPlan, registry

pytestmark = pytest.mark.asyncio(loop_scope="module")

MIB = 1024 * 1024
LARGE = "tests.e2e_flows.large_flows:registry"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def default_limits(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("large-default"), workers=0) as stack:
        await stack.start_worker(LARGE)
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def small_limits(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    # frame limit: 4 MiB state + 2 x 1 MiB values + 1 MiB = 7 MiB (over the 2 MiB HTTP limit)
    async with e2e_stack(
        tmp_path_factory.mktemp("large-small"),
        workers=0,
        max_value_bytes=MIB,
        max_flow_state_bytes=4 * MIB,
        max_request_bytes=2 * MIB,
    ) as stack:
        await stack.start_worker(LARGE)
        yield stack


def client(stack: Stack) -> AsyncClient:
    return AsyncClient(
        registry(), options=ClientOptions(server_address=stack.server.address, timeout=120)
    )


def runs(stack: Stack, event: str, flow_id: str) -> int:
    return sum(1 for ln in read_log(stack.directory, "large") if ln.split()[:2] == [event, flow_id])


async def test_five_values_of_3_5_mib_commit_once(default_limits: Stack) -> None:
    stack = default_limits
    async with client(stack) as c:
        companion = unique_id("companion")
        await c.start_flow(COMPANION, companion, 3.0)
        flow_id = unique_id("fill")
        size = 3 * MIB + MIB // 2
        await c.start_flow(FILLER, flow_id, FillPlan(count=5, size=size))
        result = await c.wait_for_flow(flow_id, timeout=120)
        assert result.status is FlowStatus.COMPLETED, result
        assert runs(stack, "fill", flow_id) == 1
        sizes = await c.invoke_rpc(FILLER.sizes, flow_id)
        assert sizes == [size - 2] * 5 + [0] * 3
        # the other task of that Worker was not dropped with a closed connection
        other = await c.wait_for_flow(companion, timeout=60)
        assert other.status is FlowStatus.COMPLETED and other.single_output(int) == 1
        assert runs(stack, "linger", companion) == 1


async def test_a_result_within_the_limits_but_over_the_http_limit_commits(
    small_limits: Stack,
) -> None:
    stack = small_limits
    async with client(stack) as c:
        flow_id = unique_id("fill")
        await c.start_flow(FILLER, flow_id, FillPlan(count=3, size=MIB - 1024))
        result = await c.wait_for_flow(flow_id, timeout=60)
        assert result.status is FlowStatus.COMPLETED, result
        assert runs(stack, "fill", flow_id) == 1


async def test_a_result_over_the_state_limit_fails_once_naming_it(small_limits: Stack) -> None:
    stack = small_limits
    async with client(stack) as c:
        flow_id = unique_id("fill")
        await c.start_flow(FILLER, flow_id, FillPlan(count=5, size=MIB - 1024))
        result = await c.wait_for_flow(flow_id, timeout=60)
        assert result.status is FlowStatus.FAILED, result
        assert "max_flow_state_bytes" in (result.error_message or ""), result
        assert runs(stack, "fill", flow_id) == 1


async def test_a_result_over_the_frame_limit_fails_once_naming_it(small_limits: Stack) -> None:
    stack = small_limits
    async with client(stack) as c:
        companion = unique_id("companion")
        await c.start_flow(COMPANION, companion, 2.0)
        flow_id = unique_id("fill")
        await c.start_flow(FILLER, flow_id, FillPlan(count=8, size=MIB - 1024))
        result = await c.wait_for_flow(flow_id, timeout=60)
        assert result.status is FlowStatus.FAILED, result
        message = result.error_message or ""
        assert "LIMIT_EXCEEDED" in message and "max_worker_frame_bytes" in message, result
        assert runs(stack, "fill", flow_id) == 1
        other = await c.wait_for_flow(companion, timeout=60)
        assert other.status is FlowStatus.COMPLETED and other.single_output(int) == 1
