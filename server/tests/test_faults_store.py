"""Store outages under a running server: a private PostgreSQL cluster stopped and started.

Each test runs a real server process on its own database of a private cluster
(``tests._pgcluster``), a real SDK Worker child (``tests._fault_flows``), and takes the
database away for several seconds while Timers, retries and durable starts are due. The
shared PostgreSQL server is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path

import httpx
import pytest
from dex import AsyncClient, ClientOptions, FlowStatus
from dex_server.testing import RunningServer

from tests._fault_flows import LINGERER, NAPPER, RETRIER, RETRY_AFTER_S, VOUCHED, registry
from tests._pg import until
from tests._pgcluster import PgCluster, private_cluster

SERVER_DIR = Path(__file__).resolve().parent.parent
OUTAGE_S = 8.0

pytestmark = pytest.mark.skipif(
    not PgCluster.available(), reason="initdb and pg_ctl (PostgreSQL server binaries) not found"
)


@pytest.fixture(scope="module")
def pg() -> Iterator[PgCluster]:
    with private_cluster() as cluster:
        yield cluster


class Setup:
    def __init__(self, pg: PgCluster, server: RunningServer, directory: Path) -> None:
        self.pg = pg
        self.server = server
        self.directory = directory
        self.log = directory / "events.log"
        self.gates = directory / "gates"
        self.client = AsyncClient(
            registry(), options=ClientOptions(server_address=server.address, timeout=60)
        )

    def events(self) -> list[list[str]]:
        if not self.log.exists():
            return []
        return [ln.split() for ln in self.log.read_text().splitlines()]

    def logged(self, event: str, flow_id: str) -> bool:
        return any(e[:2] == [event, flow_id] for e in self.events())

    def open_gate(self, name: str) -> None:
        (self.gates / name).touch()

    async def health(self) -> dict[str, object]:
        async with httpx.AsyncClient(base_url=self.server.url, timeout=10) as http:
            body: dict[str, object] = (await http.get("/v1/health")).json()
            return body

    def server_log(self) -> str:
        return (self.server.directory / "server.log").read_text(errors="replace")


@contextlib.asynccontextmanager
async def setup(pg: PgCluster, tmp_path: Path) -> AsyncIterator[Setup]:
    if not _accepts(pg):
        pg.start()
    url = pg.create_database(f"dex_fault_{uuid.uuid4().hex[:12]}")
    server = RunningServer(tmp_path / "server", {"database_url": url, "log_level": "info"})
    server.directory.mkdir(parents=True)
    await server.start()
    st = Setup(pg, server, tmp_path)
    st.gates.mkdir()
    env = {
        **os.environ,
        "DEX_FAULT_LOG": str(st.log),
        "DEX_FAULT_GATES": str(st.gates),
        "PYTHONUNBUFFERED": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "tests._fault_flows", server.address],
        cwd=SERVER_DIR,
        env=env,
        start_new_session=True,
    )
    try:
        await until(lambda: any(e[:1] == ["ready"] for e in st.events()), 30, "the Worker")
        yield st
    finally:
        await st.client.close()
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        if not _accepts(pg):
            pg.start()
        await server.stop()


def _accepts(pg: PgCluster) -> bool:
    import psycopg

    try:
        psycopg.connect(pg.url(), connect_timeout=5).close()
    except psycopg.OperationalError:
        return False
    return True


async def phase_is(st: Setup, flow_id: str, phase: str) -> bool:
    state = await st.client.get_flow_state(flow_id)
    return any(a.phase == phase for a in state.active_steps)


async def test_a_timer_fires_after_an_outage(pg: PgCluster, tmp_path: Path) -> None:
    async with setup(pg, tmp_path) as st:
        flow_id = f"nap-{uuid.uuid4().hex[:8]}"
        await st.client.start_flow(NAPPER, flow_id, None)
        await until(lambda: phase_is(st, flow_id, "waiting"), 30, "the Timer wait")

        pg.stop()  # the 1 s Timer comes due while the database is away
        await asyncio.sleep(OUTAGE_S)
        assert not st.logged("woke", flow_id)
        pg.start()

        result = await st.client.wait_for_flow(flow_id, timeout=30)
        assert result.status is FlowStatus.COMPLETED, result
        assert result.single_output(str) == "woke"
        # the timer loop reports the outage once, not once per try
        log = st.server_log()
        assert log.count("loading due Timers failed") <= 1, log[-4000:]


async def test_health_is_degraded_during_an_outage_and_ok_after(
    pg: PgCluster, tmp_path: Path
) -> None:
    async with setup(pg, tmp_path) as st:

        async def status() -> object:
            return (await st.health()).get("status")

        assert await status() == "ok"
        pg.stop()
        down_at = time.monotonic()
        await until(lambda: _is(status(), "degraded"), 15, "health to report degraded")
        body = await st.health()
        assert body["ok"] is False and "store" in str(body["reason"]), body
        cli = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "dex_server.cli", "--server", st.server.address, "health"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 1 and "degraded" in cli.stdout, (cli.stdout, cli.stderr)
        # a Worker registering now is refused with a typed, retryable error (not a dropped socket)
        assert await _register(st.server.address) == "UNAVAILABLE"
        await asyncio.sleep(max(0.0, OUTAGE_S - (time.monotonic() - down_at)))
        pg.start()

        await until(lambda: _is(status(), "ok"), 15, "health to report ok again")
        assert await _register(st.server.address) == "registered"
        log = st.server_log()
        assert log.count("the store probe failed") == 1, log[-4000:]
        assert log.count("the store probe works again") == 1, log[-4000:]


async def _register(address: str) -> str:
    """Register a Worker for ``Napper``: ``"registered"``, or the refusal's code."""
    import websockets
    from dex._protocol import (
        Register,
        Registered,
        RegisterRejected,
        encoder,
        server_frame_decoder,
    )

    flows = registry().flow_specs()
    async with websockets.connect(f"ws://{address}/v1/worker") as ws:
        frame = Register(
            app_worker_id="probe", flows=flows, max_concurrent_tasks=2, reserved_rpc_tasks=1
        )
        await ws.send(encoder.encode(frame).decode())
        answer = server_frame_decoder.decode(await asyncio.wait_for(ws.recv(), 30))
    if isinstance(answer, Registered):
        return "registered"
    assert isinstance(answer, RegisterRejected), answer
    return answer.code


async def _is(got: Awaitable[object], want: object) -> bool:
    return await got == want


async def test_a_retry_backoff_fires_after_an_outage(pg: PgCluster, tmp_path: Path) -> None:
    async with setup(pg, tmp_path) as st:
        flow_id = f"retry-{uuid.uuid4().hex[:8]}"
        await st.client.start_flow(RETRIER, flow_id, None)

        async def first_failure_committed() -> bool:
            state = await st.client.get_flow_state(flow_id)
            return any(a.last_failure is not None for a in state.active_steps)

        await until(first_failure_committed, 30, "the first attempt's failure")
        pg.stop()  # the retry comes due RETRY_AFTER_S later, inside the outage
        assert OUTAGE_S > RETRY_AFTER_S
        await asyncio.sleep(OUTAGE_S)
        attempts = [e for e in st.events() if e[:2] == ["attempt", flow_id]]
        assert attempts == [["attempt", flow_id, "1"]], attempts
        pg.start()

        result = await st.client.wait_for_flow(flow_id, timeout=40)
        assert result.status is FlowStatus.COMPLETED, result
        assert result.single_output(int) == 2


async def test_results_sent_during_an_outage_commit_after_it(pg: PgCluster, tmp_path: Path) -> None:
    async with setup(pg, tmp_path) as st:
        flows = [f"linger-{i}-{uuid.uuid4().hex[:8]}" for i in range(3)]
        for flow_id in flows:
            await st.client.start_flow(LINGERER, flow_id, "outage")
        for flow_id in flows:
            await until(
                functools.partial(st.logged, "lingering", flow_id), 30, "the Steps to start"
            )
        pg.stop()
        st.open_gate("outage")  # the three results reach the server while the store is away
        for flow_id in flows:
            await until(
                functools.partial(st.logged, "lingered", flow_id), 30, "the Steps to return"
            )
        await asyncio.sleep(OUTAGE_S / 2)
        pg.start()
        for flow_id in flows:
            result = await st.client.wait_for_flow(flow_id, timeout=40)
            assert result.status is FlowStatus.COMPLETED, result
        # the lost commits are reported once for the outage, not once per result
        log = st.server_log()
        assert log.count("committing a Step result failed") == 0, log[-4000:]
        assert log.count("committing Step results failed") <= 1, log[-4000:]


async def test_a_durable_start_the_store_refuses_gets_an_error_answer(
    pg: PgCluster, tmp_path: Path
) -> None:
    async with setup(pg, tmp_path) as st:
        flow_id = f"vouch-{uuid.uuid4().hex[:8]}"
        await st.client.start_flow(VOUCHED, flow_id, "ro")
        await until(lambda: st.logged("entered", flow_id), 30, "the Step to start")

        # the cluster refuses every write (a real database error, not a lost connection)
        pg.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        pg.execute("SELECT pg_reload_conf()")
        await until(lambda: _read_only(pg), 10, "the cluster to turn read-only")
        try:
            st.open_gate("ro-go")
            await until(
                lambda: any(e[0].startswith("heartbeat-") and e[1] == flow_id for e in st.events()),
                30,
                "an answer to the durable heartbeat",
            )
        finally:
            pg.execute("ALTER SYSTEM RESET default_transaction_read_only")
            pg.execute("SELECT pg_reload_conf()")
            # the reload is signalled, not awaited: go on once a new session sees it
            await until(lambda: not _read_only(pg), 10, "the cluster to accept writes again")
        assert st.logged("heartbeat-INTERNAL", flow_id), st.events()
        st.open_gate("ro-finish")
        result = await st.client.wait_for_flow(flow_id, timeout=30)
        assert result.status is FlowStatus.COMPLETED, result
        assert result.single_output(str) == "INTERNAL"


def _read_only(pg: PgCluster) -> bool:
    import psycopg

    with psycopg.connect(pg.url()) as conn:
        row = conn.execute("SHOW default_transaction_read_only").fetchone()
    return row is not None and row[0] == "on"


async def test_a_durable_start_during_a_long_outage_gets_an_error_answer(
    pg: PgCluster, tmp_path: Path
) -> None:
    async with setup(pg, tmp_path) as st:
        flow_id = f"vouch-{uuid.uuid4().hex[:8]}"
        await st.client.start_flow(VOUCHED, flow_id, "down")
        await until(lambda: st.logged("entered", flow_id), 30, "the Step to start")
        pg.stop()
        try:
            st.open_gate("down-go")
            # the server keeps trying for 30 s, then tells the handler the store is away
            await until(
                lambda: any(e[0].startswith("heartbeat-") and e[1] == flow_id for e in st.events()),
                90,
                "an answer to the durable heartbeat",
            )
        finally:
            pg.start()
        assert st.logged("heartbeat-UNAVAILABLE", flow_id), st.events()
        st.open_gate("down-finish")
        result = await st.client.wait_for_flow(flow_id, timeout=40)
        assert result.status is FlowStatus.COMPLETED, result
        assert result.single_output(str) == "UNAVAILABLE"
