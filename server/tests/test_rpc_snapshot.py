"""A transactional RPC reads its snapshot once when nothing else reaches the store meanwhile.

Its snapshot, Worker call and commit are atomic against the run's other writes: the server
holds the run's commits from its snapshot on. On a store this server alone writes, the
first read stands once the hold is taken if no other job was submitted since it (jobs run
in order); only then is a second read saved. Here an embedded server and an in-process
Worker run a transactional RPC that counts in an Attribute; the store's job counter shows
one read and one commit for an RPC on an idle run, and a job slipped in between the first
read and the hold makes the server read again, with the RPC's effect still applied once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dex
import pytest
from dex_server.app import ServerConfig
from dex_server.embedded import EmbeddedServer
from dex_server.service import Runtime

pytestmark = pytest.mark.timeout(60)

COUNT = dex.Attribute("count", int)


class Idle(dex.Step[None]):
    async def wait_for(self, context: dex.Context, input: None) -> dex.Wait:
        return dex.Wait.until(dex.Timer.by_duration(3600))

    async def execute(self, context: dex.Context, input: None) -> dex.StepDecision:
        return dex.StepDecision.graceful_complete(None)


class Counter(dex.Flow[None]):
    def get_steps(self) -> dex.StepList[None]:
        return dex.StepList.start_step(Idle())

    def get_persistence_schema(self) -> dex.PersistenceSchema:
        return dex.PersistenceSchema.of(COUNT)

    @dex.rpc(is_transactional=True)
    def bump(self, context: dex.Context, input: int) -> int:
        value = (COUNT.get(context) or 0) + input
        COUNT.set(context, value)
        return value


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[dex.AsyncClient, Runtime, Counter]]:
    flow = Counter()
    registry = dex.Registry([flow], allow_async_handlers=True)
    config = ServerConfig(database_path=tmp_path / "db.sqlite3", port=0)
    async with EmbeddedServer(config=config, name="rpc-snapshot") as server:
        options = dex.WorkerOptions(server_address=server.worker_address)
        worker = dex.AsyncWorker(registry, None, options)
        running = asyncio.create_task(worker.start())
        client = dex.AsyncClient(registry, None, dex.ClientOptions(server_address=server.address))
        try:
            await worker.wait_pull_registered(30)
            runtime: Runtime = server._server.config.app.state.runtime  # type: ignore[union-attr]
            yield client, runtime, flow
        finally:
            await client.close()
            await worker.stop()
            await running


async def _started(client: dex.AsyncClient, flow: Counter) -> None:
    """Start the Flow and wait until its Step waits (no job of its own is left to come)."""
    await client.start_flow(flow, "c", None)
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        page = await client.get_history("c", page_size=100)
        if any(e.type == "StepWaitForCompleted" for e in page.events):
            return
        assert asyncio.get_running_loop().time() < deadline, "the Step never waited"
        await asyncio.sleep(0.02)


async def _jobs_of(runtime: Runtime, call: Any) -> tuple[Any, int]:
    before = runtime.store.submitted
    result = await call
    return result, runtime.store.submitted - before


async def test_an_rpc_on_an_idle_run_reads_once_and_commits_once(tmp_path: Path) -> None:
    async with serving(tmp_path) as (client, runtime, flow):
        await _started(client, flow)
        for step, expected in ((1, 1), (2, 3), (3, 6)):
            value, jobs = await _jobs_of(runtime, client.invoke_rpc(flow.bump, "c", step))
            assert value == expected
            assert jobs == 2, f"{jobs} store jobs: one snapshot and one commit expected"


async def test_a_job_between_the_read_and_the_hold_makes_the_rpc_read_again(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as (client, runtime, flow):
        await _started(client, flow)
        await client.invoke_rpc(flow.bump, "c", 5)
        enter_gate = runtime._enter_gate
        slipped: list[asyncio.Future[None]] = []

        def enter_gate_after_a_job(run_id: str) -> asyncio.Lock:
            # another write of the store arrives after the RPC's first read
            slipped.append(runtime.store.submit(lambda tx: None))
            return enter_gate(run_id)

        runtime._enter_gate = enter_gate_after_a_job  # type: ignore[method-assign]
        value, jobs = await _jobs_of(runtime, client.invoke_rpc(flow.bump, "c", 2))
        runtime._enter_gate = enter_gate  # type: ignore[method-assign]
        assert len(slipped) == 1 and slipped[0].done()
        assert value == 7
        assert jobs == 4, f"{jobs} store jobs: snapshot, the slipped job, snapshot, commit"
        value, jobs = await _jobs_of(runtime, client.invoke_rpc(flow.bump, "c", 1))
        assert (value, jobs) == (8, 2)
