"""Split brain between two servers on one PostgreSQL database: fencing and clock skew.

Server A is stopped (SIGSTOP) or cut from the database (a TCP proxy) for longer than the
lease while its Worker runs Steps; server B takes A's executions over and redelivers them
to its own Worker. When A comes back, it must commit nothing for those attempts: a
single-attempt Step's code after its durable start runs once (a side-effect log written
by the Step says where), and lock keys stay with the attempt B dispatched. A server whose
clock is 20 s off is not taken over while it lives (leases use the database's clock).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from dex import FlowStatus, ServiceUnavailableError
from dex_server.testing import RunningServer, TcpProxy

from tests._mn_flows import GUARDED, HOLD, PACE, SOLO, STRIDES
from tests._pg import db_url, never, until
from tests.test_multinode_pg import (
    Worker,
    client,
    completed_steps,
    logged,
    pytestmark,
    read_log,
    workers_ready,
)

__all__ = ["db_url", "pytestmark"]

LEASE_S = 3.0


@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    """Set ``name`` in this process's environment (inherited by children started inside)."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


@contextlib.asynccontextmanager
async def pair(
    tmp_path: Path, url_a: str, url_b: str, *, clock_a: float = 0.0, **overrides: object
) -> AsyncIterator[tuple[RunningServer, RunningServer]]:
    """Servers A and B on one database (A through ``url_a``), A's clock ``clock_a`` off."""
    a = RunningServer(tmp_path / "a", {"database_url": url_a, **overrides})
    b = RunningServer(tmp_path / "b", {"database_url": url_b, **overrides})
    try:
        for s in (a, b):
            s.directory.mkdir(parents=True, exist_ok=True)
        with _env("DEX_TEST_CLOCK_OFFSET_S", str(clock_a) if clock_a else None):
            await a.start()
        await b.start()
        yield a, b
    finally:
        for s in (a, b):
            with contextlib.suppress(ProcessLookupError):
                if s._proc is not None:
                    os.kill(s.pid, signal.SIGCONT)  # a failed test may leave A stopped
            await s.stop()


def _lock_rows(db_url: str) -> list[tuple[str, str]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT holder, server_id FROM attribute_locks").fetchall()
    return [(str(r[0]), str(r[1])) for r in rows]


def _servers(db_url: str) -> set[tuple[str, float]]:
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT server_id, started_at FROM servers").fetchall()
    return {(str(r[0]), float(r[1])) for r in rows}


def _by(log: Path, event: str, pid: str) -> list[list[str]]:
    return [r for r in logged(log, event) if r[4] == pid]


@pytest.mark.parametrize("fault", ["sigstop", "cut"])
async def test_a_server_taken_over_while_away_commits_nothing_for_its_attempts(
    tmp_path: Path, db_url: str, fault: str
) -> None:
    log = tmp_path / "fence.log"
    gates = tmp_path / "gates"
    gates.mkdir()
    proxy = TcpProxy(("127.0.0.1", 5432))
    url_a = proxy.url_for(db_url) if fault == "cut" else db_url
    try:
        async with pair(tmp_path, url_a, db_url, fsync=False, server_lease_s=LEASE_S) as (a, b):
            wa, wb = Worker(a.address, log), Worker(b.address, log)
            try:
                pa, pb = await workers_ready(log, [wa, wb])
                async with client(a) as ca, client(b) as cb:
                    # started through A: A claims both and runs them on its Worker
                    await ca.start_flow(SOLO, "solo-1", "solo")
                    await ca.start_flow(HOLD, "hold-1", "hold")
                    await until(
                        lambda: _by(log, "solo", pa) and _by(log, "hold", pa), 30, "A's Steps"
                    )
                    [(holder, server_a)] = _lock_rows(db_url)

                    if fault == "sigstop":
                        os.kill(a.pid, signal.SIGSTOP)
                    else:
                        proxy.cut()
                    # B sees A dead (no heartbeat; or no session) and redelivers both
                    await until(
                        lambda: _by(log, "solo", pb) and _by(log, "hold", pb),
                        60,
                        "server B to take A's Steps over",
                    )
                    # B's attempt holds the key now (same attempt: the same holder name)
                    await until(
                        lambda: [(h, s) for h, s in _lock_rows(db_url) if s != server_a],
                        20,
                        "B's attempt to take the lock key",
                    )
                    assert [h for h, _ in _lock_rows(db_url)] == [holder]

                    # A's Worker goes on: a durable start and a result reach A on its return
                    if fault == "sigstop":
                        (gates / f"solo-{pa}").touch()
                        (gates / f"hold-{pa}").touch()
                        os.kill(a.pid, signal.SIGCONT)
                    else:
                        proxy.restore()
                        (gates / f"solo-{pa}").touch()
                        (gates / f"hold-{pa}").touch()

                    def split_brain() -> list[str]:
                        wrong = []
                        if logged(log, "effect"):
                            wrong.append("the single-attempt Step ran past its durable start")
                        rows = _lock_rows(db_url)
                        if [h for h, _ in rows] != [holder] or rows[0][1] == server_a:
                            wrong.append(f"the lock key left B's attempt: {rows}")
                        return wrong

                    await never(split_brain, 4.0, "server A wrote for attempts B took over")

                    (gates / f"solo-{pb}").touch()
                    (gates / f"hold-{pb}").touch()
                    solo = await cb.wait_for_flow("solo-1", 60)
                    hold = await cb.wait_for_flow("hold-1", 60)
                    assert solo.status is FlowStatus.COMPLETED, solo
                    assert hold.status is FlowStatus.COMPLETED, hold
                    # what committed came from B's Worker, once
                    assert solo.single_output(str) == pb
                    assert hold.single_output(str) == pb
                    assert await completed_steps(cb, "solo-1") == ["Solo-1"]
                    assert await completed_steps(cb, "hold-1") == ["Hold-1"]
                    assert _lock_rows(db_url) == []
            finally:
                wa.kill()
                wb.kill()
    finally:
        proxy.close()
    effects = [(r[1], r[4]) for r in logged(log, "effect")]
    assert effects == [("solo-1", pb)], effects
    server_log = (tmp_path / "a" / "server.log").read_text()
    assert "another server took" in server_log or "taken over" in server_log


async def test_an_rpc_on_a_server_taken_over_while_it_ran_commits_nothing(
    tmp_path: Path, db_url: str
) -> None:
    log = tmp_path / "rpc.log"
    gates = tmp_path / "gates"
    gates.mkdir()
    async with pair(tmp_path, db_url, db_url, fsync=False, server_lease_s=LEASE_S) as (a, b):
        wa, wb = Worker(a.address, log), Worker(b.address, log)
        try:
            await workers_ready(log, [wa, wb])
            async with client(a) as ca, client(b) as cb:
                await ca.start_flow(GUARDED, "guarded-9")
                # a transactional RPC through A holds the Flow's commits in the store
                tally = asyncio.create_task(ca.invoke_rpc(GUARDED.tally, "guarded-9", "rpc"))
                await until(lambda: logged(log, "tally-rpc") and _lock_rows(db_url), 30, "RPC")
                os.kill(a.pid, signal.SIGSTOP)
                # B takes A over and frees what A held: the hold is gone
                await until(lambda: not _lock_rows(db_url), 60, "server B to take A over")
                (gates / "rpc").touch()
                os.kill(a.pid, signal.SIGCONT)
                with pytest.raises(ServiceUnavailableError):
                    await tally
                # the RPC's write (seen + 1000) did not land
                assert await cb.invoke_rpc(GUARDED.guard, "guarded-9") == 0
        finally:
            wa.kill()
            wb.kill()


@pytest.mark.parametrize("offset_s", [-20.0, 20.0])
async def test_a_skewed_server_clock_takes_nothing_over(
    tmp_path: Path, db_url: str, offset_s: float
) -> None:
    log = tmp_path / "pace.log"
    async with pair(tmp_path, db_url, db_url, clock_a=offset_s, fsync=False) as (a, b):
        workers = [Worker(a.address, log), Worker(b.address, log)]
        try:
            await workers_ready(log, workers)
            before = _servers(db_url)
            assert len(before) == 2
            async with client(a) as ca, client(b) as cb:
                ids = [f"pace-{i}" for i in range(16)]
                await asyncio.gather(
                    *((ca if i % 2 else cb).start_flow(PACE, fid, 0) for i, fid in enumerate(ids))
                )
                results = await asyncio.gather(*(cb.wait_for_flow(fid, 120) for fid in ids))
                assert [r.status for r in results] == [FlowStatus.COMPLETED] * len(ids), results
                assert [r.single_output(int) for r in results] == [STRIDES] * len(ids)
                for fid in ids:
                    steps = await completed_steps(ca, fid)
                    assert len(steps) == STRIDES + 1 == len(set(steps)), steps
            rows = read_log(log)
            runs = Counter((r[0], r[1], r[2]) for r in rows if r[0] in ("stride", "sealed"))
            assert sum(1 for r in rows if r[0] == "sealed") == len(ids)
            reruns = sorted(k for k, n in runs.items() if n > 1)
            assert not reruns, f"Steps ran again on the other server: {reruns}"
            # neither server was judged dead: both rows are the ones they first wrote
            assert _servers(db_url) == before
        finally:
            for w in workers:
                w.kill()
