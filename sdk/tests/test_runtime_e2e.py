"""Smoke tests of the runtime against a real server and real Worker child processes."""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from dex import (
    AsyncClient,
    Client,
    ClientOptions,
    Flow,
    FlowStatus,
    StartFlowOptions,
)
from dex.errors import FlowNotFoundError, LongPollTimeoutError, UnauthenticatedError
from dex_server.testing import RunningServer, running_server

from tests.support import FileGate, WorkerProcess
from tests.support.smoke_flows import (
    BIG,
    COUNT,
    OUT,
    BigValue,
    Counter,
    Emitter,
    SlowFlow,
    TwoSteps,
    registry,
)

FACTORY = "tests.support.smoke_flows:registry"
REGISTRY = registry()
F = TypeVar("F", bound=Flow[Any])


def registered(cls: type[F]) -> F:
    """The instance of ``cls`` the Registry holds: Client calls take that very object."""
    return next(f for f in REGISTRY.flows if isinstance(f, cls))


def _id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path / "server") as srv:
        yield srv


@pytest.fixture
def worker(server: RunningServer, tmp_path: Path) -> Iterator[WorkerProcess]:
    gates = tmp_path / "gates"
    gates.mkdir()
    with WorkerProcess(
        FACTORY, server_address=server.address, max_concurrent_tasks=4, gate_dir=gates
    ) as proc:
        yield proc


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(REGISTRY, options=ClientOptions(server_address=server.address)) as c:
        yield c


async def test_two_step_flow_runs_to_completion(worker: WorkerProcess, client: AsyncClient) -> None:
    flow_id = _id("two")
    run_id = await client.start_flow(registered(TwoSteps), flow_id, 4)
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(int) == 50
    assert [c.step_type for c in result.completions] == ["TimesTen"]
    info = await client.describe_flow(flow_id)
    assert (info.flow_id, info.run_id, info.flow_type) == (flow_id, run_id, "TwoSteps")
    assert info.status is FlowStatus.COMPLETED
    assert info.closed_at is not None and info.closed_at >= info.started_at
    history = await client.get_history(flow_id)
    types = [e.type for e in history.events]
    assert types[0] == "FlowStarted" and types[-1] == "FlowClosed"
    assert types.count("StepExecuteCompleted") == 2
    page = await client.list_flows(flow_type="TwoSteps")
    assert flow_id in [f.flow_id for f in page.flows]


async def test_wait_for_unknown_and_open_flows(worker: WorkerProcess, client: AsyncClient) -> None:
    with pytest.raises(FlowNotFoundError):
        await client.describe_flow(_id("missing"))
    flow_id = _id("open")
    await client.start_flow(registered(Counter), flow_id)
    with pytest.raises(LongPollTimeoutError):
        await client.wait_for_flow(flow_id, timeout=0.3)


async def test_rpc_round_trip(worker: WorkerProcess, client: AsyncClient) -> None:
    flow = registered(Counter)
    flow_id = _id("rpc")
    await client.start_flow(flow, flow_id, options=StartFlowOptions().with_attribute(COUNT, 2))
    assert await client.invoke_rpc(flow.add, flow_id, 3) == 5
    assert await client.invoke_rpc(flow.add, flow_id, 7) == 12
    assert await client.invoke_rpc(flow.read, flow_id) == 12


async def test_stream_write_and_read(worker: WorkerProcess, client: AsyncClient) -> None:
    flow_id = _id("stream")
    await client.start_flow(registered(Emitter), flow_id, 3)
    token = ""
    seen = []
    for _ in range(3):
        message = await client.read_stream(flow_id, OUT, token, timeout=20)
        seen.append((message.value, message.source))
        token = message.resume_token
    assert [v for v, _ in seen] == ["m0", "m1", "m2"]
    assert all(source.startswith("#Emit-") for _, source in seen)
    await client.write_stream(flow_id, OUT, "test-client", "from-client")
    message = await client.read_stream(flow_id, OUT, token, timeout=20)
    assert (message.value, message.source) == ("from-client", "test-client")
    with pytest.raises(LongPollTimeoutError):
        await client.read_stream(flow_id, OUT, message.resume_token, timeout=0.3)
    page = await client.list_stream_messages(flow_id, OUT, page_size=2)
    assert [m.value for m in page.messages] == ["from-client", "m2"]
    assert page.before_page_token
    older = await client.list_stream_messages(flow_id, OUT, 10, page.before_page_token)
    assert [m.value for m in older.messages] == ["m1", "m0"]
    assert (await client.wait_for_flow(flow_id, timeout=20)).single_output(int) == 3


def test_sync_client(server: RunningServer, worker: WorkerProcess) -> None:
    with Client(REGISTRY, options=ClientOptions(server_address=server.address)) as client:
        assert client.health_check() is True
        flow_id = _id("sync")
        client.start_flow(registered(TwoSteps), flow_id, 1)
        assert client.wait_for_flow(flow_id, timeout=20).single_output(int) == 20
        assert client.describe_flow(flow_id).status is FlowStatus.COMPLETED
        counter = registered(Counter)
        rpc_flow_id = _id("sync-rpc")
        client.start_flow(counter, rpc_flow_id)
        assert client.invoke_rpc(counter.add, rpc_flow_id, 4) == 4


async def test_sigterm_drains_running_task(
    server: RunningServer, worker: WorkerProcess, client: AsyncClient, tmp_path: Path
) -> None:
    gate = FileGate(tmp_path / "gates", "slow")
    flow_id = _id("drain")
    await client.start_flow(registered(SlowFlow), flow_id, "x")
    await gate.async_wait_until_reached(timeout=20)
    worker.send_signal(signal.SIGTERM)
    assert worker.is_alive()  # draining: the Step is still inside the gate
    gate.release()
    code = await asyncio.to_thread(worker.wait, 20)
    assert code == 0
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(str) == "x:done"
    assert gate.reached_count() == 1  # the same attempt finished; nothing ran twice
    assert worker.stats()["tasks_completed"] >= 1


async def test_worker_fetches_a_big_blob_once(
    server: RunningServer, worker: WorkerProcess, client: AsyncClient
) -> None:
    big = "x" * 50_000  # far over the server's blob threshold
    flow_id = _id("blob")
    steps = 5
    await client.start_flow(
        registered(BigValue), flow_id, steps, StartFlowOptions().with_attribute(BIG, big)
    )
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(int) == len(big)
    assert await asyncio.to_thread(worker.terminate, 20) == 0
    stats = worker.stats()
    assert stats["blob_fetches"] == 1
    assert stats["blob_cache_hits"] >= steps - 1


async def test_blob_cache_survives_worker_restart(
    server: RunningServer, client: AsyncClient, tmp_path: Path
) -> None:
    big = "y" * 40_000
    cache_dir = tmp_path / "blob-cache"
    fetches = []
    for round_ in range(2):
        with WorkerProcess(
            FACTORY, server_address=server.address, blob_cache_dir=cache_dir
        ) as proc:
            flow_id = _id(f"cache{round_}")
            options = StartFlowOptions().with_attribute(BIG, big)
            await client.start_flow(registered(BigValue), flow_id, 2, options)
            assert (await client.wait_for_flow(flow_id, timeout=20)).single_output(int) == len(big)
            assert await asyncio.to_thread(proc.terminate, 20) == 0
            fetches.append(proc.stats()["blob_fetches"])
    assert fetches == [1, 0]  # the restarted Worker read the blob from its disk cache


async def test_token_auth_for_client_and_worker(tmp_path: Path) -> None:
    async with running_server(tmp_path / "auth-server", token="s3cret") as srv:
        anonymous = AsyncClient(REGISTRY, options=ClientOptions(server_address=srv.address))
        async with anonymous:
            with pytest.raises(UnauthenticatedError):
                await anonymous.describe_flow("any")
            assert await anonymous.health_check() is True  # health needs no token
        options = ClientOptions(server_address=srv.address, credential="s3cret")
        with WorkerProcess(FACTORY, server_address=srv.address, credential="s3cret"):
            async with AsyncClient(REGISTRY, options=options) as authed:
                flow_id = _id("auth")
                await authed.start_flow(registered(TwoSteps), flow_id, 0)
                result = await authed.wait_for_flow(flow_id, timeout=20)
                assert result.single_output(int) == 10
