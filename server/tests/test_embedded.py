"""The embedded server and in-process Workers: crash and restart, HTTP clients, errors, close.

A child process runs an application with an ``EmbeddedServer`` on a SQLite file and an
in-process ``AsyncWorker``; the test kills it inside a Step and starts it again. Other
tests run the embedded server in the test process itself, next to real Workers and a real
HTTP client.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import dex
import httpx
import pytest
from dex.errors import InProcessServerNotFoundError
from dex_server.embedded import EmbeddedServer

from tests._embedded_app import PIPELINE
from tests._pg import until
from tests.test_cli import run_cli_process

pytestmark = pytest.mark.store_independent  # every test opens a SQLite file of its own

APP = Path(__file__).with_name("_embedded_app.py")


def _registry() -> dex.Registry:
    return dex.Registry([PIPELINE], allow_async_handlers=True)


def _spawn(
    db: Path, address_file: Path, run_log: Path, gate: Path | None
) -> subprocess.Popen[bytes]:
    address_file.unlink(missing_ok=True)
    args = [sys.executable, str(APP), str(db), str(address_file), str(run_log)]
    if gate is not None:
        args.append(str(gate))
    with (address_file.parent / "app.log").open("ab") as log:
        return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)


async def _address(address_file: Path, proc: subprocess.Popen[bytes]) -> str:
    def ready() -> bool:
        assert proc.poll() is None, (address_file.parent / "app.log").read_text()
        return address_file.exists() and bool(address_file.read_text().strip())

    await until(ready, 60, f"the address in {address_file}")
    return address_file.read_text().strip()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=30)


async def _completed_steps(client: dex.AsyncClient, flow_id: str) -> list[str]:
    page = await client.get_history(flow_id, page_size=1000)
    return [e.type for e in page.events if e.type == "StepExecuteCompleted"]


async def test_a_kill_inside_a_step_and_a_restart_finish_the_flow_without_repeating_a_step(
    tmp_path: Path,
) -> None:
    db, address_file, run_log = tmp_path / "app.sqlite3", tmp_path / "address", tmp_path / "ran"
    gate = tmp_path / "gate"
    gate.mkdir()
    flow_id = f"pipeline-{uuid.uuid4().hex[:8]}"
    first = _spawn(db, address_file, run_log, gate)
    procs = [first]
    try:
        address = await _address(address_file, first)
        options = dex.ClientOptions(server_address=address, timeout=30.0)
        async with dex.AsyncClient(_registry(), options=options) as client:
            await client.start_flow(PIPELINE, flow_id, 1)
        await until(lambda: (gate / "entered").exists(), 60, "Step Three to start")
        first.send_signal(signal.SIGKILL)  # inside Step Three: One and Two are committed
        first.wait(timeout=30)
        assert first.returncode == -signal.SIGKILL

        second = _spawn(db, address_file, run_log, None)
        procs.append(second)
        address = await _address(address_file, second)
        options = dex.ClientOptions(server_address=address, timeout=30.0)
        async with dex.AsyncClient(_registry(), options=options) as client:
            result = await client.wait_for_flow(flow_id, timeout=60)
            assert result.status is dex.FlowStatus.COMPLETED, result
            assert len(await _completed_steps(client, flow_id)) == 4
        runs = Counter(line.split()[0] for line in run_log.read_text().splitlines())
        # only the attempt the kill interrupted ran again
        assert runs == {"One": 1, "Two": 1, "Three": 2, "Four": 1}, runs
    finally:
        for proc in procs:
            _stop(proc)


@contextlib.asynccontextmanager
async def _serving(worker: dex.AsyncWorker) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(worker.start())
    try:
        yield task
    finally:
        await worker.close()
        await task


async def test_an_http_client_starts_and_reads_flows_that_an_in_process_worker_runs(
    tmp_path: Path,
) -> None:
    async with EmbeddedServer(tmp_path / "db.sqlite3", name="http-client") as server:
        assert server.worker_address == "inproc://http-client"
        worker = dex.AsyncWorker(
            _registry(), options=dex.WorkerOptions(server_address=server.worker_address)
        )
        async with _serving(worker):
            await worker.wait_pull_registered(timeout=30)
            options = dex.ClientOptions(server_address=server.address, timeout=30.0)
            async with dex.AsyncClient(_registry(), options=options) as client:
                ids = [f"f{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
                for flow_id in ids:
                    await client.start_flow(PIPELINE, flow_id, 1)
                for flow_id in ids:
                    result = await client.wait_for_flow(flow_id, timeout=60)
                    assert result.status is dex.FlowStatus.COMPLETED, result
                    info = await client.describe_flow(flow_id)
                    assert info.flow_type == "Pipeline"
                    assert len(await _completed_steps(client, flow_id)) == 4
                listed = await client.list_flows("Pipeline", page_size=100)
                assert {f.flow_id for f in listed.flows} == set(ids)
            # dexcli, a process of its own (this loop runs the server meanwhile)
            cli = await asyncio.to_thread(
                run_cli_process, "--server", server.address, "flow", "list", "--all", "-ojson"
            )
            assert cli.code == 0, cli.err
            assert all(flow_id in cli.out for flow_id in ids), cli.out
            base = f"http://{server.address}"
            async with httpx.AsyncClient(base_url=base, follow_redirects=True) as http:
                page = await http.get("/ui")
                assert page.status_code == 200, page.text  # Dex Web on the same port


async def test_an_inproc_address_without_an_embedded_server_names_the_problem(
    tmp_path: Path,
) -> None:
    worker = dex.AsyncWorker(
        _registry(), options=dex.WorkerOptions(server_address="inproc://nowhere")
    )
    with pytest.raises(InProcessServerNotFoundError) as raised:
        await worker.start()
    assert "inproc://nowhere" in str(raised.value)
    assert "EmbeddedServer" in str(raised.value)
    assert isinstance(raised.value, ConnectionError)
    async with EmbeddedServer(tmp_path / "db.sqlite3", name="somewhere"):
        with pytest.raises(InProcessServerNotFoundError, match="inproc://somewhere"):
            await worker.start()  # the running ones are named too


async def test_two_embedded_servers_need_two_names(tmp_path: Path) -> None:
    async with EmbeddedServer(tmp_path / "a.sqlite3", name="twice"):
        with pytest.raises(ValueError, match="inproc://twice"):
            await EmbeddedServer(tmp_path / "b.sqlite3", name="twice").start()


async def test_closing_the_server_disconnects_its_workers_and_a_new_one_takes_them_back(
    tmp_path: Path,
) -> None:
    db = tmp_path / "db.sqlite3"
    first = EmbeddedServer(db, name="restarted")
    await first.start()
    address = first.address
    worker = dex.AsyncWorker(
        _registry(), options=dex.WorkerOptions(server_address="inproc://restarted")
    )
    async with _serving(worker) as serving:
        await worker.wait_pull_registered(timeout=30)
        assert worker.is_registered()
        await first.close()
        await first.close()  # twice is fine
        assert not worker.is_registered()
        assert not serving.done()  # the Worker keeps trying, as after a server shutdown
        with pytest.raises(httpx.ConnectError):
            async with httpx.AsyncClient(base_url=f"http://{address}") as http:
                await http.get("/v1/health")
        with pytest.raises(RuntimeError):
            await first.start()

        async with EmbeddedServer(db, name="restarted") as second:
            await until(worker.is_registered, 30, "the Worker to register again")
            options = dex.ClientOptions(server_address=second.address, timeout=30.0)
            async with dex.AsyncClient(_registry(), options=options) as client:
                flow_id = f"again-{uuid.uuid4().hex[:6]}"
                await client.start_flow(PIPELINE, flow_id, 1)
                result = await client.wait_for_flow(flow_id, timeout=60)
                assert result.status is dex.FlowStatus.COMPLETED, result
    assert worker.stats.connections == 2


async def test_an_in_process_worker_needs_the_token_of_a_server_that_has_one(
    tmp_path: Path,
) -> None:
    async with EmbeddedServer(tmp_path / "db.sqlite3", name="guarded", token="s3cret") as server:
        wrong = dex.AsyncWorker(
            _registry(),
            options=dex.WorkerOptions(
                server_address=server.worker_address,
                credential="nope",
                pull=dex.PullWorkerOptions(stop_on_permanent_stream_rejection=True),
            ),
        )
        with pytest.raises(dex.PullRegistrationError, match="UNAUTHENTICATED"):
            await wrong.start()
        right = dex.AsyncWorker(
            _registry(),
            options=dex.WorkerOptions(server_address=server.worker_address, credential="s3cret"),
        )
        async with _serving(right):
            await right.wait_pull_registered(timeout=30)


class _SyncStep(dex.Step[int]):
    def execute(self, ctx: dex.Context, value: int) -> dex.StepDecision:
        return dex.StepDecision.graceful_complete()


class SyncPipeline(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(_SyncStep())


async def test_a_sync_worker_on_its_own_thread_uses_the_in_process_address(
    tmp_path: Path,
) -> None:
    flow = SyncPipeline()
    registry = dex.Registry([flow])
    async with EmbeddedServer(tmp_path / "db.sqlite3", name="threads") as server:
        worker = dex.Worker(
            registry, options=dex.WorkerOptions(server_address=server.worker_address)
        )
        thread = threading.Thread(target=worker.start, daemon=True)
        thread.start()
        try:
            options = dex.ClientOptions(server_address=server.address, timeout=30.0)
            async with dex.AsyncClient(registry, options=options) as client:
                await client.start_flow(flow, "sync-1", 1)
                result = await client.wait_for_flow("sync-1", timeout=60)
                assert result.status is dex.FlowStatus.COMPLETED, result
        finally:
            await asyncio.to_thread(worker.close)
            await asyncio.to_thread(thread.join, 30)
    assert not thread.is_alive()


class _Held:
    """What the held Step saw: how often it ran, and the event that lets it finish."""

    runs = 0
    started: asyncio.Event | None = None
    release: asyncio.Event | None = None


class Hold(dex.Step[int]):
    async def execute(self, ctx: dex.Context, value: int) -> dex.StepDecision:
        assert _Held.started is not None and _Held.release is not None
        _Held.runs += 1
        _Held.started.set()
        await _Held.release.wait()
        return dex.StepDecision.graceful_complete()


class HeldFlow(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Hold())


async def test_a_step_running_while_its_link_drops_is_resumed_not_run_again(
    tmp_path: Path,
) -> None:
    _Held.runs, _Held.started, _Held.release = 0, asyncio.Event(), asyncio.Event()
    flow = HeldFlow()
    registry = dex.Registry([flow], allow_async_handlers=True)
    async with EmbeddedServer(tmp_path / "db.sqlite3", name="dropped") as server:
        worker = dex.AsyncWorker(
            registry, options=dex.WorkerOptions(server_address=server.worker_address)
        )
        async with _serving(worker):
            await worker.wait_pull_registered(timeout=30)
            options = dex.ClientOptions(server_address=server.address, timeout=30.0)
            async with dex.AsyncClient(registry, options=options) as client:
                await client.start_flow(flow, "held", 1)
                await asyncio.wait_for(_Held.started.wait(), 30)
                # the link drops under the running Step, as a lost WebSocket would
                for end in list(server._links):
                    end.close(1006, "dropped")
                await until(lambda: worker.stats.connections == 2, 30, "a reconnect")
                await until(worker.is_registered, 30, "the new registration")
                _Held.release.set()
                result = await client.wait_for_flow("held", timeout=60)
                assert result.status is dex.FlowStatus.COMPLETED, result
                page = await client.get_history("held", page_size=1000)
                types = [e.type for e in page.events]
                assert "StepExecuteFailed" not in types, types
    assert _Held.runs == 1  # resumed on the new link, not delivered again


class Echo(dex.Step[str]):
    async def execute(self, ctx: dex.Context, value: str) -> dex.StepDecision:
        return dex.StepDecision.graceful_complete(value[::-1])


class EchoFlow(dex.Flow[str]):
    def get_steps(self) -> dex.StepList[str]:
        return dex.StepList.start_step(Echo())


async def test_an_in_process_worker_fetches_large_values_over_the_http_api(
    tmp_path: Path,
) -> None:
    flow = EchoFlow()
    registry = dex.Registry([flow], allow_async_handlers=True)
    async with EmbeddedServer(tmp_path / "db.sqlite3", name="large") as server:
        worker = dex.AsyncWorker(
            registry, options=dex.WorkerOptions(server_address=server.worker_address)
        )
        async with _serving(worker):
            options = dex.ClientOptions(server_address=server.address, timeout=30.0)
            async with dex.AsyncClient(registry, options=options) as client:
                large = "abc" * 100_000  # far above the blob threshold: sent as a reference
                await client.start_flow(flow, "large", large)
                result = await client.wait_for_flow("large", timeout=60)
                assert result.status is dex.FlowStatus.COMPLETED, result
                assert result.single_output(str) == large[::-1]
        assert worker.stats.blob_fetches >= 1  # the input came by reference, over HTTP


def test_the_embedded_example_resumes_its_flow_after_the_process_is_killed() -> None:
    # examples/embedded_flow/run.py kills its own application inside a Step, runs it again
    # on the same SQLite file and checks the Step counts itself (exit 1 when they differ)
    example = Path(__file__).resolve().parents[2] / "examples" / "embedded_flow" / "run.py"
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Step runs: Reserve 1, Charge 2, Ship 1" in done.stdout
    assert "the Flow finished: 'order 1001 shipped'" in done.stdout


def test_the_listening_socket_is_tcp_so_asyncio_turns_nagle_off_on_its_connections(
    tmp_path: Path,
) -> None:
    # an embedded server runs on the application's loop, often asyncio's own: that loop
    # sets TCP_NODELAY only on sockets whose protocol is IPPROTO_TCP, and without it an
    # answer written in two sends waits for the client's delayed ACK
    from dex_server.app import ServerConfig, build_app, uvicorn_server

    config = ServerConfig(database_path=tmp_path / "db.sqlite3", port=0)
    _, listeners = uvicorn_server(config, build_app(config), [])
    try:
        assert [sock.proto for sock in listeners.sockets] == [socket.IPPROTO_TCP]
    finally:
        listeners.close()
