"""End to end: a server that stops ends its pending long polls at once, retryably."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dex.errors import ServiceUnavailableError

from tests.e2e_flows.harness import e2e_stack, unique_id, wait_for_phase
from tests.e2e_flows.lifecycle_flows import LIFECYCLE
from tests.support import async_wait_until, open_sockets

pytestmark = pytest.mark.asyncio


async def test_a_stopping_server_answers_pending_long_polls_unavailable(tmp_path: Path) -> None:
    async with e2e_stack(tmp_path / "stack") as stack:
        flow_id = unique_id("stop")
        await stack.client.start_flow(LIFECYCLE, flow_id, "wait")
        await wait_for_phase(stack.client, flow_id, "Hold", "waiting")
        log = stack.server.directory / "server.log"
        before = open_sockets(stack.server.pid)
        pending = asyncio.create_task(stack.client.wait_for_flow(flow_id, timeout=120))

        async def polling() -> bool | None:
            # long polls have a pool of their own: the first opens a new connection
            return open_sockets(stack.server.pid) > before or None

        await async_wait_until("the long poll reached the server", polling, timeout=10)
        await stack.server.stop()
        with pytest.raises(ServiceUnavailableError, match="stopping") as raised:
            await asyncio.wait_for(pending, timeout=10)
        assert raised.value.retryable
        # uvicorn logs this when a request holds its graceful stop to the end
        assert b"timeout graceful shutdown exceeded" not in log.read_bytes()
