"""Several servers on one PostgreSQL database, with SDK Workers in child processes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import psycopg
import pytest
from dex import AsyncClient, ClientOptions, FlowStatus, RpcLockConflictError
from dex_server.testing import RunningServer

from tests._mn_flows import BELL_FLOW, GUARDED, HOPS, RELAY, VOUCHED, registry
from tests._pg import db_url, needs_postgres, never, until

__all__ = ["db_url"]  # a fixture, used by name

SERVER_DIR = Path(__file__).resolve().parent.parent


pytestmark = needs_postgres


class Worker:
    """``python -m tests._mn_flows ADDRESS`` in its own process group."""

    def __init__(self, address: str, log: Path, *, hold: bool = False) -> None:
        env = {
            **os.environ,
            "DEX_MN_LOG": str(log),
            "DEX_MN_GATES": str(log.parent / "gates"),
            "PYTHONUNBUFFERED": "1",
        }
        if hold:
            env["DEX_MN_HOLD"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests._mn_flows", address],
            cwd=SERVER_DIR,
            env=env,
            start_new_session=True,
        )

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@contextlib.asynccontextmanager
async def cluster(
    tmp_path: Path, url: str, n: int, **overrides: object
) -> AsyncIterator[list[RunningServer]]:
    servers = [
        RunningServer(tmp_path / f"s{i}", {"database_url": url, **overrides}) for i in range(n)
    ]
    try:
        for s in servers:
            s.directory.mkdir(parents=True, exist_ok=True)
            await s.start()
        yield servers
    finally:
        for s in servers:
            await s.stop()


def client(server: RunningServer) -> AsyncClient:
    return AsyncClient(registry(), options=ClientOptions(server_address=server.address, timeout=60))


def read_log(path: Path) -> list[list[str]]:
    return [ln.split() for ln in path.read_text().splitlines()] if path.exists() else []


async def workers_ready(log: Path, workers: list[Worker]) -> list[str]:
    """Wait until every Worker registered with its server; their pids."""
    pids = [str(w.proc.pid) for w in workers]
    await until(
        lambda: {r[4] for r in read_log(log) if r[0] == "ready"} >= set(pids), 30, "Workers"
    )
    return pids


def logged(log: Path, event: str) -> list[list[str]]:
    return [r for r in read_log(log) if r[0] == event]


async def all_events(c: AsyncClient, flow_id: str) -> list[Any]:
    out: list[Any] = []
    token: str | None = None
    while True:
        page = await c.get_history(flow_id, page_size=1000, page_token=token)
        out.extend(page.events)
        token = page.next_page_token
        if not token:
            return out


async def completed_steps(c: AsyncClient, flow_id: str) -> list[str]:
    """Step execution ids of every committed StepExecuteCompleted event, in order."""
    return [
        str(msgspec.json.decode(ev.payload)["context"]["stepExecutionId"])
        for ev in await all_events(c, flow_id)
        if ev.type == "StepExecuteCompleted"
    ]


async def test_killing_one_of_two_servers_loses_and_repeats_nothing(
    tmp_path: Path, db_url: str
) -> None:
    log = tmp_path / "steps.log"
    async with cluster(tmp_path, db_url, 2, fsync=False) as (a, b):
        pids: list[str] = []
        # server A's Worker keeps every Flow started through A in flight until A dies
        workers = [Worker(a.address, log, hold=True), Worker(b.address, log)]
        try:
            # a server without a registered Worker hands its Flows to the other one
            pids = await workers_ready(log, workers)
            async with client(a) as ca, client(b) as cb:
                ids = [f"relay-{i}" for i in range(50)]
                await asyncio.gather(
                    *(
                        (ca if i % 2 == 0 else cb).start_flow(RELAY, fid, 0)
                        for i, fid in enumerate(ids)
                    )
                )
                # mid-run: some Flows are past their Timer, most are not done
                await until(
                    lambda: (
                        sum(1 for r in read_log(log) if r[0] == "nap") >= 10
                        and any(r[0] == "held" for r in read_log(log))
                    ),
                    30,
                    "naps and a held Begin",
                )
                a.kill()
                results = await asyncio.gather(*(cb.wait_for_flow(fid, 60) for fid in ids))
                assert [r.status for r in results] == [FlowStatus.COMPLETED] * len(ids)
                for fid in ids:
                    steps = await completed_steps(cb, fid)
                    dupes = [s for s, n in Counter(steps).items() if n > 1]
                    assert not dupes, f"{fid}: committed twice: {dupes}"
                    kinds = [s.split("-")[0] for s in steps]
                    # the Timer fired once (one Nap), every hop committed once
                    assert kinds.count("Nap") == 1 and kinds.count("Hop") == HOPS, steps
                    assert kinds.count("Once") + kinds.count("Rescue") == 1, steps
        finally:
            for w in workers:
                w.kill()
    rows = read_log(log)
    once = Counter((r[1], r[2]) for r in rows if r[0] == "once")
    assert once and max(once.values()) == 1, "a single-attempt Step ran twice"
    # Flows held on server A's Worker went on with server B's Worker after A died
    held = {r[1] for r in rows if r[0] == "held"}
    assert held and all(r[4] == pids[0] for r in rows if r[0] == "held")
    hopped_on_b = {r[1] for r in rows if r[0] == "hop" and r[4] == pids[1]}
    assert held <= hopped_on_b, f"held on A, never finished on B: {held - hopped_on_b}"


async def test_a_message_through_one_server_wakes_a_step_on_another(
    tmp_path: Path, db_url: str
) -> None:
    log = tmp_path / "bell.log"
    async with cluster(tmp_path, db_url, 2, fsync=False) as (a, b):
        worker = Worker(b.address, log)  # only server B has a Worker
        try:
            async with client(a) as ca:
                await ca.start_flow(BELL_FLOW, "bell-1")
                # the RPC runs on B's Worker; its publish commits through A
                deadline = time.monotonic() + 20
                while True:
                    try:
                        rung = await ca.invoke_rpc(BELL_FLOW.ring, "bell-1", "ding")
                        break
                    except Exception:
                        if time.monotonic() > deadline:
                            raise
                        await asyncio.sleep(0.1)
                assert rung == f"rung by {worker.proc.pid}"
                sent = time.monotonic()
                result = await ca.wait_for_flow("bell-1", 30)
                woke_after = time.monotonic() - sent
            assert result.status is FlowStatus.COMPLETED
            assert result.single_output(str) == f"ding {worker.proc.pid}"
            # a signal, not the one-second polling, carried the wake-up across servers
            assert woke_after < 0.9, woke_after
        finally:
            worker.kill()


async def test_killed_database_connections_lose_nothing(tmp_path: Path, db_url: str) -> None:
    log = tmp_path / "steps.log"
    async with cluster(tmp_path, db_url, 2) as (a, b):
        workers = [Worker(a.address, log), Worker(b.address, log)]
        try:
            async with client(a) as ca, client(b) as cb, httpx.AsyncClient() as http:
                ids = [f"relay-{i}" for i in range(20)]
                for i, fid in enumerate(ids):
                    await (ca if i % 2 else cb).start_flow(RELAY, fid, 0)
                codes: Counter[int] = Counter()
                unavailable = 0
                with psycopg.connect(db_url, autocommit=True) as admin:
                    for _ in range(6):
                        admin.execute(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE"
                            " datname=current_database() AND application_name LIKE 'dex-server%'"
                        )
                        for srv in (a, b):
                            r = await http.get(f"{srv.url}/v1/flows/relay-0")
                            codes[r.status_code] += 1
                            if r.status_code == 503:
                                assert r.json()["code"] == "UNAVAILABLE"
                                unavailable += 1
                        await asyncio.sleep(0.3)
                assert set(codes) <= {200, 503}, codes
                assert unavailable >= 1, codes
                results = await asyncio.gather(*(ca.wait_for_flow(fid, 60) for fid in ids))
                assert {r.status for r in results} == {FlowStatus.COMPLETED}
                for fid in ids:
                    steps = await completed_steps(ca, fid)
                    assert len(steps) == len(set(steps)), steps
                    assert [s.split("-")[0] for s in steps].count("Hop") == HOPS
        finally:
            for w in workers:
                w.kill()


async def test_a_durable_start_is_acknowledged_after_the_database_connection_dies(
    tmp_path: Path, db_url: str
) -> None:
    log = tmp_path / "vouch.log"
    (tmp_path / "gates").mkdir()
    async with cluster(tmp_path, db_url, 1, fsync=False) as (a,):
        worker = Worker(a.address, log)
        try:
            await workers_ready(log, [worker])
            async with client(a) as ca:
                await ca.start_flow(VOUCHED, "vouch-1", "go")
                await until(lambda: logged(log, "vouch"), 20, "the Step")
                with psycopg.connect(db_url, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE"
                        " datname=current_database() AND application_name='dex-server'"
                    )
                # the durable start is the first write on the dead connection: it fails,
                # and the server must record it again rather than leave the Worker waiting
                (tmp_path / "gates" / "go").touch()
                await until(lambda: logged(log, "vouched"), 20, "the acknowledgement")
                result = await ca.wait_for_flow("vouch-1", 30)
            assert result.status is FlowStatus.COMPLETED
            assert result.single_output(str) == "go"
        finally:
            worker.kill()


async def test_a_stream_written_through_one_server_is_read_through_another(
    tmp_path: Path, db_url: str
) -> None:
    async with cluster(tmp_path, db_url, 2, fsync=False) as (a, b):
        worker = Worker(b.address, tmp_path / "w.log")  # registers the Bell spec on B
        try:
            path = "/v1/streams/Bell/news/bell-9"
            async with httpx.AsyncClient(timeout=30) as http:
                deadline = time.monotonic() + 20
                while (await http.get(f"{a.url}{path}")).status_code != 200:
                    assert time.monotonic() < deadline, "server A never learned the spec"
                    await asyncio.sleep(0.1)
                reader = asyncio.create_task(http.get(f"{b.url}{path}/next?timeout_s=20"))
                await asyncio.sleep(0.3)  # the reader is parked on B
                sent = time.monotonic()
                body = {"source": "test", "value": "hello"}
                assert (await http.post(f"{a.url}{path}", json=body)).status_code == 200
                got = (await reader).json()["message"]
                assert time.monotonic() - sent < 0.9
                assert got["value"] == "hello" and got["source"] == "test"
                listed = (await http.get(f"{b.url}{path}")).json()["messages"]
                assert [m["value"] for m in listed] == ["hello"]
        finally:
            worker.kill()


@contextlib.asynccontextmanager
async def guarded_pair(
    tmp_path: Path, db_url: str, log: Path
) -> AsyncIterator[tuple[AsyncClient, AsyncClient, list[str]]]:
    """Servers A and B with a registered Worker each: a client of each, the Worker pids."""
    (tmp_path / "gates").mkdir()
    async with cluster(tmp_path, db_url, 2, fsync=False) as (a, b):
        workers = [Worker(a.address, log), Worker(b.address, log)]
        try:
            pids = await workers_ready(log, workers)
            async with client(a) as ca, client(b) as cb:
                yield ca, cb, pids
        finally:
            for w in workers:
                w.kill()


async def test_attribute_locks_hold_across_servers(tmp_path: Path, db_url: str) -> None:
    log = tmp_path / "locks.log"
    gates = tmp_path / "gates"
    async with guarded_pair(tmp_path, db_url, log) as (ca, cb, pids):
        fid = "guarded-1"
        await ca.start_flow(GUARDED, fid)
        # the RPC's commit on A makes the Latch ready there: A's Worker runs it
        await ca.invoke_rpc(GUARDED.latch, fid, "first")
        await until(lambda: logged(log, "latch-first"), 20, "the first Latch")
        # through B, an RPC that needs the lock fails fast
        with pytest.raises(RpcLockConflictError):
            await cb.invoke_rpc(GUARDED.bump, fid)
        # a Latch that B dispatches waits for the lock A's Latch holds
        await cb.invoke_rpc(GUARDED.latch, fid, "second")
        await never(lambda: logged(log, "latch-second"), 1.5, "both held the lock")
        (gates / "first").touch()
        await until(lambda: logged(log, "latch-second"), 20, "the second Latch")
        with pytest.raises(RpcLockConflictError):
            await ca.invoke_rpc(GUARDED.bump, fid)
        (gates / "second").touch()
        await until(lambda: logged(log, "done-second"), 20, "the second Latch's end")

        async def bumped() -> int | None:
            try:
                value: int = await ca.invoke_rpc(GUARDED.bump, fid)
            except RpcLockConflictError:
                return None  # the second Latch's result is still committing
            return value

        deadline = time.monotonic() + 20
        while (value := await bumped()) is None:
            assert time.monotonic() < deadline, "the lock was never freed"
            await asyncio.sleep(0.05)
        assert value == 102
    # the premise: the two Latches ran on Workers of different servers
    assert logged(log, "latch-first")[0][4] == pids[0]
    assert logged(log, "latch-second")[0][4] == pids[1]


async def test_a_transactional_rpc_holds_step_results_committed_by_another_server(
    tmp_path: Path, db_url: str
) -> None:
    log = tmp_path / "tally.log"
    gates = tmp_path / "gates"
    async with guarded_pair(tmp_path, db_url, log) as (ca, cb, pids):
        fid = "guarded-2"
        await ca.start_flow(GUARDED, fid)
        await ca.invoke_rpc(GUARDED.latch, fid, "step")
        await until(lambda: logged(log, "latch-step"), 20, "the Latch")
        # B's transactional RPC has read the Flow and waits at its gate
        tally = asyncio.create_task(cb.invoke_rpc(GUARDED.tally, fid, "rpc"))
        await until(lambda: logged(log, "tally-rpc"), 20, "the RPC")
        # the Latch returns; server A must not commit its result before the RPC's
        (gates / "step").touch()
        await until(lambda: logged(log, "done-step"), 20, "the Latch's end")

        async def latch_committed() -> bool:
            return any(s.startswith("Latch") for s in await completed_steps(ca, fid))

        await never(latch_committed, 1.5, "a Step result overtook the RPC")
        (gates / "rpc").touch()
        assert await tally == 0
        await until(latch_committed, 20, "the Latch's commit")
        events = [e.type for e in await all_events(ca, fid)]
        rpc_at = events.index("RpcExecutionCompleted")
        assert rpc_at < events.index("StepExecuteCompleted"), events
        # the Latch's write (from its own snapshot) landed after the RPC's
        assert await ca.invoke_rpc(GUARDED.guard, fid) == 1
    assert logged(log, "latch-step")[0][4] == pids[0]
    assert logged(log, "tally-rpc")[0][4] == pids[1]
