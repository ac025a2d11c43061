"""Search and Attribute matches across two servers on one PostgreSQL database.

The Worker child registers with server A only; the Client talks to server B. Every Step
and RPC commits on A (B hands its Flows over), and B's searches and waits see those commits.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
import pytest_asyncio
from dex import AsyncClient, AttributeMatch, ClientOptions
from dex_server.testing import RunningServer, create_test_database, drop_test_database

from tests.e2e_flows.harness import ALL_FLOWS, registry, unique_id
from tests.e2e_flows.search_flows import AMOUNT, SEARCH_ORDER, STAGE
from tests.support import WorkerProcess


def _postgres_reachable() -> bool:
    try:
        drop_test_database(create_test_database())
    except psycopg.OperationalError:
        return False
    return True


pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(not _postgres_reachable(), reason="PostgreSQL is not reachable"),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pair(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    root = tmp_path_factory.mktemp("search-pair")
    url = create_test_database()
    servers = [RunningServer(root / n, {"database_url": url, "fsync": False}) for n in "ab"]
    worker: WorkerProcess | None = None
    try:
        for s in servers:
            s.directory.mkdir(parents=True, exist_ok=True)
            await s.start()
        worker = WorkerProcess(ALL_FLOWS, server_address=servers[0].address, gate_dir=root)
        await asyncio.to_thread(worker.start)
        yield servers[0], servers[1]
    finally:
        if worker is not None:
            worker.close()
        for s in servers:
            await s.stop()
        drop_test_database(url)


def _client(server: RunningServer) -> AsyncClient:
    return AsyncClient(registry(), options=ClientOptions(server_address=server.address))


async def test_a_search_on_one_server_sees_commits_made_on_the_other(
    pair: tuple[RunningServer, RunningServer], tmp_path: Path
) -> None:
    a, b = pair
    batch = uuid.uuid4().hex
    async with _client(a) as ca, _client(b) as cb:
        flow_id = unique_id("pair")
        await cb.start_flow(SEARCH_ORDER, flow_id, {"batch": batch, "Amount": 3})
        assert (
            await cb.wait_for_attribute_match(flow_id, STAGE, AttributeMatch.equal_to("placed"))
            == "placed"
        )
        for c in (ca, cb):
            page = await c.search_flows(f"Batch = '{batch}' AND Amount = 3", 10)
            assert [f.flow_id for f in page.flows] == [flow_id]

        waiting = asyncio.create_task(
            cb.wait_for_attribute_match(flow_id, AMOUNT, AttributeMatch.greater_than(100))
        )
        await asyncio.sleep(0.2)  # the wait on B is already polling
        await ca.invoke_rpc(SEARCH_ORDER.update, flow_id, {"Amount": 101})
        assert await asyncio.wait_for(waiting, 30) == 101
        page = await cb.search_flows(f"Batch = '{batch}' ORDER BY Amount DESC", 10)
        assert [dict(f.indexed_attributes)["Amount"] for f in page.flows] == [101]
