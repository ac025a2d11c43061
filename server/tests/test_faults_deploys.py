"""Deploys and concurrent servers: spec versions, one running run per Flow ID, the data lock.

A Flow type's spec changes with its code. During a rolling deploy Workers and clients of
two versions run side by side: every run keeps the spec version it started with, a start
refused for its ID leaves no spec behind, two servers on one PostgreSQL database never
start two running runs of one Flow ID, and a second server on an embedded store's data
folder refuses to start. The runtime's per-run bookkeeping is freed when runs close.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import uvicorn
from dex._protocol import (
    ConditionSpec,
    DecisionSpec,
    FlowSpec,
    InvokeRpcRequest,
    Movement,
    Publish,
    RpcSpec,
    StartFlowRequest,
    StateDecl,
    StepSpec,
    Task,
    TaskResult,
    WaitSpec,
    encoder,
)
from dex_server.app import ServerConfig, _Server, build_app
from dex_server.service import _runtime
from dex_server.service._runtime import Runtime
from dex_server.store import FlowRecord
from dex_server.store._migrations import load_migrations
from dex_server.store._records import flow_decoder, record_encoder
from dex_server.store.sqlite import apply_migrations as sqlite_migrate
from dex_server.store.sqlite._store import _SqliteMigrationDb
from dex_server.testing import (
    RunningServer,
    create_test_database,
    drop_test_database,
    fresh_database,
    running_server,
    selected_database,
)

from tests._pg import postgres_reachable, until
from tests._rawworker import RawWorker, raw
from tests.test_cli import dexcli_cmd

# two code versions of one Flow type: v1 goes First -> Second, v2 goes First -> Third
V1 = FlowSpec(
    flow_type="Deploy",
    start_step="First",
    steps=[StepSpec(step_type="First"), StepSpec(step_type="Second")],
)
V2 = FlowSpec(
    flow_type="Deploy",
    start_step="First",
    steps=[StepSpec(step_type="First"), StepSpec(step_type="Third")],
)
# a third version whose start is refused: it must leave no trace
GHOST = FlowSpec(flow_type="Deploy", start_step="Ghost", steps=[StepSpec(step_type="Ghost")])


class Deployer:
    """Serves every version's Steps; a First whose input says ``hold`` waits for release."""

    def __init__(self) -> None:
        self.release: dict[str, asyncio.Event] = {}

    async def __call__(self, w: RawWorker, t: Task) -> TaskResult | None:
        if t.kind != "execute":
            return None
        if t.step_type == "First":
            arg = msgspec.json.decode(t.input) if t.input else {}
            if arg.get("hold"):
                await self.release.setdefault(t.flow_id, asyncio.Event()).wait()
            move = Movement(step_type=arg["next"])
            return TaskResult(
                task_id=t.task_id, decision=DecisionSpec(kind="go_to", movements=[move])
            )
        return TaskResult(
            task_id=t.task_id,
            decision=DecisionSpec(kind="graceful_complete", output=raw(t.step_type)),
        )


def start_body(
    flow_id: str, spec: FlowSpec, arg: object = None, *, policy: str = "default"
) -> bytes:
    return encoder.encode(
        StartFlowRequest(
            flow_type="Deploy",
            flow_id=flow_id,
            spec=spec,
            input=raw(arg) if arg is not None else None,
            id_reuse_policy=policy,  # type: ignore[arg-type]
            request_id=uuid.uuid4().hex,
        )
    )


EMPTY = FlowSpec(flow_type="Deploy")


def first_task(w: RawWorker, flow_id: str) -> Task | None:
    return next((t for t in w.tasks if t.flow_id == flow_id), None)


async def result(http: httpx.AsyncClient, flow_id: str) -> dict[str, Any]:
    r = await http.get(f"/v1/flows/{flow_id}/result?timeout_s=30", timeout=60)
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def completed_with(res: dict[str, Any]) -> str | None:
    if res["status"] != "completed":
        return f"{res['status']}: {res.get('error_type')}: {res.get('error_message')}"
    return str(res["completions"][0]["output"])


def spec_rows(srv: RunningServer) -> list[tuple[str, bytes]]:
    """``(version, spec)`` of every stored version of the Deploy type."""
    sql = "SELECT version, spec FROM flow_specs WHERE flow_type = 'Deploy'"
    if srv.database_url is not None:
        import psycopg

        with psycopg.connect(srv.database_url) as conn:
            return [(str(v), bytes(s)) for v, s in conn.execute(sql).fetchall()]
    with contextlib.closing(sqlite3.connect(srv.database_path)) as c:
        return [(str(v), bytes(s)) for v, s in c.execute(sql).fetchall()]


# --------------------------------------------------------------------------- spec versions


async def test_a_start_with_a_new_spec_leaves_running_flows_on_theirs(tmp_path: Path) -> None:
    handler = Deployer()
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [V1], handler) as w,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        r = await http.post(
            "/v1/flows", content=start_body("old", V1, {"next": "Second", "hold": 1})
        )
        assert r.status_code == 200, r.text
        await until(lambda: first_task(w, "old"), 20, "the v1 Flow's First Step")
        # a client of the new code version starts a Flow of the same type
        r = await http.post("/v1/flows", content=start_body("new", V2, {"next": "Third"}))
        assert r.status_code == 200, r.text
        assert completed_with(await result(http, "new")) == "Third"
        # the v1 Flow goes on to the Step only its own version has
        handler.release.setdefault("old", asyncio.Event()).set()
        assert completed_with(await result(http, "old")) == "Second"


async def test_a_worker_of_another_version_leaves_running_flows_on_theirs(tmp_path: Path) -> None:
    handler = Deployer()
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [V1], handler) as w1,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        r = await http.post(
            "/v1/flows", content=start_body("old", V1, {"next": "Second", "hold": 1})
        )
        assert r.status_code == 200, r.text
        await until(lambda: first_task(w1, "old"), 20, "the v1 Flow's First Step")
        async with RawWorker(srv.address, [V2], handler):
            # the new Worker's version is the current one: a start without a spec runs it
            r = await http.post("/v1/flows", content=start_body("new", EMPTY, {"next": "Third"}))
            assert r.status_code == 200, r.text
            assert completed_with(await result(http, "new")) == "Third"
            handler.release.setdefault("old", asyncio.Event()).set()
            assert completed_with(await result(http, "old")) == "Second"
        assert len(spec_rows(srv)) == 2  # both versions stay, for the runs of each


async def test_a_refused_start_leaves_no_spec_behind(tmp_path: Path) -> None:
    handler = Deployer()
    async with running_server(tmp_path) as srv:
        async with (
            RawWorker(srv.address, [V1], handler) as w,
            httpx.AsyncClient(base_url=srv.url) as http,
        ):
            body = start_body("taken", V1, {"next": "Second", "hold": 1})
            assert (await http.post("/v1/flows", content=body)).status_code == 200
            r = await http.post("/v1/flows", content=start_body("taken", GHOST))
            assert r.status_code == 409 and r.json()["code"] == "FLOW_ALREADY_STARTED"
            # a start without a spec runs the current version: still v1, not the refused one
            r = await http.post("/v1/flows", content=start_body("after", EMPTY, {"next": "Second"}))
            assert r.status_code == 200, r.text
            assert completed_with(await result(http, "after")) == "Second"
            task = first_task(w, "after")
            assert task is not None and task.step_type == "First"
        assert len(spec_rows(srv)) == 1
        assert msgspec.json.decode(spec_rows(srv)[0][1], type=FlowSpec) == V1
        # what the store kept is what a restarted server knows, before any Worker connects
        await srv.restart()
        async with httpx.AsyncClient(base_url=srv.url) as http:
            r = await http.post("/v1/flows", content=start_body("later", EMPTY, {"next": "Second"}))
            assert r.status_code == 200, r.text
        async with RawWorker(srv.address, [V1], handler) as w:
            await until(lambda: first_task(w, "later"), 20, "the restarted server's task")
            task = first_task(w, "later")
            assert task is not None and task.step_type == "First"


@pytest.mark.skipif(
    selected_database() != "postgres" or not postgres_reachable(),
    reason="two servers share a PostgreSQL database (DEX_TEST_DATABASE=postgres)",
)
async def test_a_new_version_started_through_another_server_leaves_running_flows_on_theirs(
    tmp_path: Path,
) -> None:
    handler = Deployer()
    url = create_test_database()
    servers = [RunningServer(tmp_path / n, {"database_url": url}) for n in ("a", "b")]
    try:
        for srv in servers:
            srv.directory.mkdir()
            await srv.start()
        a, b = servers
        async with (
            RawWorker(a.address, [V1], handler) as w,
            httpx.AsyncClient(base_url=a.url) as http_a,
            httpx.AsyncClient(base_url=b.url) as http_b,
        ):
            body = start_body("old", V1, {"next": "Second", "hold": 1})
            assert (await http_a.post("/v1/flows", content=body)).status_code == 200
            await until(lambda: first_task(w, "old"), 20, "the v1 Flow's First Step")
            # the new version arrives through the other server (which has no Worker)
            r = await http_b.post("/v1/flows", content=start_body("new", V2, {"next": "Third"}))
            assert r.status_code == 200, r.text
            assert completed_with(await result(http_b, "new")) == "Third"
            handler.release.setdefault("old", asyncio.Event()).set()
            assert completed_with(await result(http_a, "old")) == "Second"
    finally:
        for srv in servers:
            await srv.stop()
        drop_test_database(url)


# --------------------------------------------------------------------------- one running run


@pytest.mark.skipif(
    selected_database() != "postgres" or not postgres_reachable(),
    reason="two servers share a PostgreSQL database (DEX_TEST_DATABASE=postgres)",
)
async def test_concurrent_starts_through_two_servers_give_one_running_run(tmp_path: Path) -> None:
    url = create_test_database()
    # no Worker: the runs stay running (and undispatched) for the whole test
    servers = [
        RunningServer(tmp_path / f"s{i}", {"database_url": url, "dispatch_wait_s": 600.0})
        for i in range(2)
    ]
    try:
        for s in servers:
            s.directory.mkdir(parents=True)
            await s.start()
        addresses = [s.url for s in servers]
        for round_ in range(5):
            # three rounds of new IDs, then two that replace the running runs of round 0
            policy = "default" if round_ < 3 else "allow_terminate_if_running"
            prefix = f"r{round_}" if policy == "default" else "r0"
            ids = [f"{prefix}-{i}" for i in range(20)]
            codes = await asyncio.to_thread(_start_all_at_once, addresses, ids, policy)
            if policy == "default":
                want = Counter(ok=1, FLOW_ALREADY_STARTED=3)
            else:  # each start terminates the run before it
                want = Counter(ok=4)
            assert {fid: codes[fid] for fid in ids} == dict.fromkeys(ids, want)
            running = await asyncio.to_thread(_running_per_flow_id, url)
            assert {fid: running.get(fid, 0) for fid in ids} == dict.fromkeys(ids, 1)
    finally:
        for s in servers:
            await s.stop()
        drop_test_database(url)


_SLOW_CLOCK = """
import os
import time

_offset = float(os.environ.get("DEX_TEST_CLOCK_OFFSET_S", "0"))
if _offset:
    _time, _time_ns = time.time, time.time_ns
    time.time = lambda: _time() + _offset
    time.time_ns = lambda: _time_ns() + int(_offset * 1e9)
"""


@pytest.mark.skipif(
    selected_database() != "postgres" or not postgres_reachable(),
    reason="two servers share a PostgreSQL database (DEX_TEST_DATABASE=postgres)",
)
async def test_a_server_with_a_slow_clock_starts_no_second_running_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run ids come from each server's clock: the newest run is not the largest id."""
    url = create_test_database()
    fast = RunningServer(tmp_path / "fast", {"database_url": url, "dispatch_wait_s": 600.0})
    slow = RunningServer(tmp_path / "slow", {"database_url": url, "dispatch_wait_s": 600.0})
    try:
        fast.directory.mkdir()
        await fast.start()
        # the second server's clock is 5 s behind (less than the server lease)
        (tmp_path / "clock").mkdir()
        (tmp_path / "clock" / "sitecustomize.py").write_text(_SLOW_CLOCK)
        path = os.pathsep.join([str(tmp_path / "clock"), os.environ.get("PYTHONPATH", "")])
        monkeypatch.setenv("PYTHONPATH", path)
        monkeypatch.setenv("DEX_TEST_CLOCK_OFFSET_S", "-5")
        slow.directory.mkdir()
        await slow.start()
        async with (
            httpx.AsyncClient(base_url=fast.url, timeout=60) as a,
            httpx.AsyncClient(base_url=slow.url, timeout=60) as b,
        ):
            for i in range(5):
                fid = f"skew-{i}"
                assert (await a.post("/v1/flows", content=start_body(fid, V1))).status_code == 200
                body = start_body(fid, V1, policy="allow_terminate_if_running")
                r = await b.post("/v1/flows", content=body)
                assert r.status_code == 200, r.text
                newest = r.json()["run_id"]
                # the slow server's run is the running one, though its id sorts first
                r = await a.post("/v1/flows", content=start_body(fid, V1))
                assert r.status_code == 409 and r.json()["code"] == "FLOW_ALREADY_STARTED", r.text
                for http in (a, b):
                    info = (await http.get(f"/v1/flows/{fid}")).json()
                    assert (info["run_id"], info["status"]) == (newest, "running")
            running = await asyncio.to_thread(_running_per_flow_id, url)
            assert running == {f"skew-{i}": 1 for i in range(5)}
    finally:
        await slow.stop()
        await fast.stop()
        drop_test_database(url)


def _start_all_at_once(
    addresses: list[str], ids: list[str], policy: str
) -> dict[str, Counter[str]]:
    """Two starts of every ID through each server, all in flight at once; the answers.

    One thread per server, released together, each with every request of its server in
    flight at once (so the servers' group commits overlap).
    """
    barrier = threading.Barrier(len(addresses))
    codes: dict[str, Counter[str]] = {fid: Counter() for fid in ids}
    lock = threading.Lock()

    async def starts(base: str) -> None:
        limits = httpx.Limits(max_connections=2 * len(ids))
        async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as http:
            await asyncio.to_thread(barrier.wait, 60)
            calls = [fid for fid in ids for _ in range(2)]
            answers = await asyncio.gather(
                *(
                    http.post("/v1/flows", content=start_body(fid, V1, policy=policy))
                    for fid in calls
                )
            )
        with lock:
            for fid, r in zip(calls, answers, strict=True):
                codes[fid]["ok" if r.status_code == 200 else str(r.json()["code"])] += 1

    with concurrent.futures.ThreadPoolExecutor(len(addresses)) as pool:
        for f in [pool.submit(asyncio.run, starts(a)) for a in addresses]:
            f.result()
    return codes


def _running_per_flow_id(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT flow_id, count(*) FROM flows WHERE status = 'running' GROUP BY flow_id"
        ).fetchall()
    return {str(f): int(n) for f, n in rows}


@pytest.mark.parametrize("dialect", ["sqlite", "postgres"])
def test_the_upgrade_keeps_one_running_run_per_flow_id(tmp_path: Path, dialect: str) -> None:
    """Runs started twice by older servers: the newest stays running, the others end."""
    if dialect == "postgres" and not postgres_reachable():
        pytest.skip("PostgreSQL is not reachable")
    runs = [
        FlowRecord(run_id=f"run-{i}", flow_id=fid, flow_type="T", started_at=float(i))
        for i, fid in enumerate(["dup", "dup", "dup", "solo"])
    ]
    with _schema_before_versions(tmp_path, dialect) as (execute, migrate):
        for f in runs:
            execute(
                "INSERT INTO flows (run_id, flow_id, flow_type, status, data) VALUES (?,?,?,?,?)",
                (f.run_id, f.flow_id, f.flow_type, f.status, record_encoder.encode(f)),
            )
            execute(
                "INSERT INTO executions (run_id, execution_id, phase, data) VALUES (?,?,?,?)",
                (f.run_id, "A-1", "execute", b"{}"),
            )
        execute(
            "INSERT INTO specs (flow_type, spec, updated_at) VALUES (?,?,?)",
            ("T", record_encoder.encode(FlowSpec(flow_type="T")), 1.0),
        )
        assert migrate() == [4, 5, 6, 7, 8, 9, 10]
        rows = execute("SELECT run_id, status, data FROM flows ORDER BY run_id", ())
        records = {str(r[0]): (str(r[1]), flow_decoder.decode(bytes(r[2]))) for r in rows}
        assert {k: v[0] for k, v in records.items()} == {
            "run-0": "terminated",
            "run-1": "terminated",
            "run-2": "running",
            "run-3": "running",
        }
        for run_id in ("run-0", "run-1"):
            rec = records[run_id][1]
            assert rec.status == "terminated" and rec.error_type == "DUPLICATE_RUN"
            assert rec.closed_at is not None and rec.retain_until is not None
        assert records["run-2"][1].status == "running"
        left = execute("SELECT run_id FROM executions ORDER BY run_id", ())
        assert [str(r[0]) for r in left] == ["run-2", "run-3"]
        # the specs of before keep version '' (what runs of before record)
        assert [
            (str(r[0]), str(r[1])) for r in execute("SELECT flow_type, version FROM flow_specs", ())
        ] == [("T", "")]
        # and from now on the database itself refuses a second running run
        with pytest.raises(Exception, match="(?i)unique"):
            execute(
                "INSERT INTO flows (run_id, flow_id, flow_type, status, data) VALUES (?,?,?,?,?)",
                ("run-9", "dup", "T", "running", b"{}"),
            )


@contextlib.contextmanager
def _schema_before_versions(
    tmp_path: Path, dialect: str
) -> Iterator[tuple[Callable[[str, tuple[Any, ...]], list[Any]], Callable[[], list[int]]]]:
    """A database migrated up to 0003 (before spec versions): ``(execute, migrate)``."""
    if dialect == "sqlite":
        conn = sqlite3.connect(tmp_path / "old.sqlite3", isolation_level=None)
        db = _SqliteMigrationDb(conn)
        db.ensure_version_table()
        for m in load_migrations("sqlite")[:3]:
            db.begin_locked()
            db.execute_script(m.sql)
            db.record(m.version, m.name, 0.0)
            db.commit()

        def execute(sql: str, args: tuple[Any, ...]) -> list[Any]:
            return conn.execute(sql, args).fetchall()

        try:
            yield execute, lambda: sqlite_migrate(conn)
        finally:
            conn.close()
        return
    import psycopg
    from dex_server.store.postgres import migrate
    from dex_server.store.postgres._store import _PgMigrationDb

    url = create_test_database()
    try:
        with psycopg.connect(url, autocommit=True) as pg:
            pdb = _PgMigrationDb(pg)
            pdb.ensure_version_table()
            for m in load_migrations("postgres")[:3]:
                pdb.begin_locked()
                pdb.execute_script(m.sql)
                pdb.record(m.version, m.name, 0.0)
                pdb.commit()

            def pg_execute(sql: str, args: tuple[Any, ...]) -> list[Any]:
                cur = pg.execute(sql.replace("?", "%s").encode(), args)
                return cur.fetchall() if cur.description else []

            yield pg_execute, lambda: migrate(url)
    finally:
        drop_test_database(url)


# --------------------------------------------------------------------------- the data lock


def _spawn_dev(data: Path, address_file: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*dexcli_cmd(), "dev", "--data-dir", str(data), "--port", "0",
         "--address-file", str(address_file)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip


async def _address(path: Path, proc: subprocess.Popen[str]) -> str:
    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"dexcli dev exited with {proc.returncode}: {proc.stderr}")
        return path.exists() and bool(path.read_text().strip())

    await until(ready, 30, f"{path}")
    return path.read_text().strip()


async def test_a_second_dev_server_on_a_data_folder_in_use_refuses_to_start(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = _spawn_dev(data, tmp_path / "a1")
    procs = [first]
    try:
        address = await _address(tmp_path / "a1", first)
        async with httpx.AsyncClient(base_url=f"http://{address}", timeout=30) as http:
            r = await http.post("/v1/flows", content=start_body("kept", V1, {"next": "Second"}))
            assert r.status_code == 200, r.text
        second = _spawn_dev(data, tmp_path / "a2")
        procs.append(second)
        out, err = await asyncio.to_thread(second.communicate, timeout=60)
        assert second.returncode != 0, out
        assert str(data.resolve()) in err and f"PID {first.pid}" in err, err
        assert "in use" in err and "Traceback" not in err, err
        assert not (tmp_path / "a2").exists()
        # the first server never noticed
        assert first.poll() is None
        async with httpx.AsyncClient(base_url=f"http://{address}", timeout=30) as http:
            assert (await http.get("/v1/health")).status_code == 200
            r = await http.get("/v1/flows/kept")
            assert r.status_code == 200 and r.json()["status"] == "running", r.text
        # a crash frees the folder: the OS drops the lock with the process
        first.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.wait)
        third = _spawn_dev(data, tmp_path / "a3")
        procs.append(third)
        address = await _address(tmp_path / "a3", third)
        async with httpx.AsyncClient(base_url=f"http://{address}", timeout=30) as http:
            r = await http.get("/v1/flows/kept")
            assert r.status_code == 200 and r.json()["status"] == "running", r.text
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


# --------------------------------------------------------------------------- bookkeeping

QUICK = FlowSpec(
    flow_type="Quick",
    start_step="A",
    steps=[StepSpec(step_type="A", has_wait_for=True)],
    rpcs=[RpcSpec(name="poke", is_transactional=True)],
    state=[StateDecl(name="inbox", kind="channel")],
)


async def quick(w: RawWorker, t: Task) -> TaskResult | None:
    if t.kind == "wait_for":
        cond = ConditionSpec(kind="channel", channel="inbox")
        return TaskResult(task_id=t.task_id, wait=WaitSpec(conditions=[cond]))
    if t.kind == "execute":
        done = DecisionSpec(kind="graceful_complete", output=raw(1))
        return TaskResult(task_id=t.task_id, decision=done)
    return TaskResult(task_id=t.task_id, publishes=[Publish(channel="inbox", value=raw(1))])


@contextlib.asynccontextmanager
async def in_process_server(config: ServerConfig) -> AsyncIterator[tuple[Runtime, str]]:
    """A server on this event loop, so a test can look at its runtime's memory."""
    app = build_app(config)
    ready = asyncio.Event()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    uv = uvicorn.Config(app, lifespan="on", log_level="warning", ws="websockets-sansio")
    server = _Server(uv, [ready], None)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await asyncio.wait_for(ready.wait(), 30)
        yield app.state.runtime, server.address
    finally:
        server.should_exit = True
        await task
        sock.close()


def _quick_start(flow_id: str) -> bytes:
    return encoder.encode(StartFlowRequest(flow_type="Quick", flow_id=flow_id, spec=QUICK))


async def _run_quick(http: httpx.AsyncClient, flow_id: str) -> None:
    assert (await http.post("/v1/flows", content=_quick_start(flow_id))).status_code == 200

    async def waiting() -> bool:
        st = (await http.get(f"/v1/flows/{flow_id}/state")).json()
        return any(a["phase"] == "waiting" for a in st.get("active_steps", []))

    await until(waiting, 20, f"{flow_id} waiting")
    rpc = encoder.encode(InvokeRpcRequest(rpc_name="poke"))
    assert (await http.post(f"/v1/flows/{flow_id}/rpc", content=rpc)).status_code == 200
    assert (await result(http, flow_id))["status"] == "completed"
    # a second read of a closed Flow's result
    assert (await result(http, flow_id))["status"] == "completed"


def _memory(rt: Runtime) -> dict[str, int]:
    return {
        "versions": len(rt._versions),
        "closed_waiters": len(rt._closed_waiters),
        "rpc_gates": len(rt._rpc_gates),
    }


async def test_run_bookkeeping_is_freed_when_runs_close(tmp_path: Path) -> None:
    with fresh_database() as url:
        config = ServerConfig(
            database_path=None if url else tmp_path / "dex.sqlite3", database_url=url, port=0
        )
        async with (
            in_process_server(config) as (rt, address),
            RawWorker(address, [QUICK], quick),
            httpx.AsyncClient(base_url=f"http://{address}", timeout=60) as http,
        ):
            for batch in range(4):
                await asyncio.gather(*(_run_quick(http, f"q{batch}-{i}") for i in range(10)))
            empty = dict.fromkeys(_memory(rt), 0)
            await until(lambda: _memory(rt) == empty, 20, f"freed bookkeeping: {_memory(rt)}")


@pytest.mark.skipif(
    selected_database() != "postgres" or not postgres_reachable(),
    reason="two servers share a PostgreSQL database (DEX_TEST_DATABASE=postgres)",
)
async def test_versions_of_runs_closed_on_another_server_are_freed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # no pruning while the runs are set up (then the entries are certainly there)
    monkeypatch.setattr(_runtime, "_VERSIONS_PRUNE_S", 600.0, raising=False)
    url = create_test_database()
    try:
        other = RunningServer(tmp_path / "b", {"database_url": url})
        other.directory.mkdir()
        await other.start()
        try:
            config = ServerConfig(database_url=url, port=0)
            async with (
                in_process_server(config) as (rt, address),
                RawWorker(address, [QUICK], quick),
                httpx.AsyncClient(base_url=f"http://{address}", timeout=60) as here,
                httpx.AsyncClient(base_url=other.url, timeout=60) as there,
            ):
                ids = [f"far-{i}" for i in range(20)]
                for fid in ids:
                    assert (
                        await here.post("/v1/flows", content=_quick_start(fid))
                    ).status_code == 200
                run_ids = {(await here.get(f"/v1/flows/{fid}")).json()["run_id"] for fid in ids}

                async def all_waiting() -> bool:
                    for fid in ids:
                        st = (await here.get(f"/v1/flows/{fid}/state")).json()
                        if not any(a["phase"] == "waiting" for a in st.get("active_steps", [])):
                            return False
                    return True

                await until(all_waiting, 30, "every Flow waiting")
                assert run_ids <= set(rt._versions)
                # the other server closes them: this one learns of it only through the store
                for fid in ids:
                    stop = encoder.encode({"type": "terminate", "reason": "elsewhere"})
                    r = await there.post(f"/v1/flows/{fid}/stop", content=stop)
                    assert r.status_code == 200, r.text
                monkeypatch.setattr(_runtime, "_VERSIONS_PRUNE_S", 0.5, raising=False)
                await until(
                    lambda: not (run_ids & set(rt._versions)), 20, "versions of closed runs freed"
                )
        finally:
            await other.stop()
    finally:
        drop_test_database(url)
