"""Streams, blobs and retention under concurrency, and bookkeeping that must not grow.

The PostgreSQL cases race two servers on one database: deterministic ones hold one
server's transaction open at the exact point of the race (two stores in this process,
each with its own writer connection, as two servers have), and stress ones run real
server processes. The in-process cases run the real app on the selected database
(``DEX_TEST_DATABASE``) and look at its in-memory bookkeeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, TypeVar

import httpx
import msgspec
import psycopg
import uvicorn
from dex._protocol import (
    ConditionSpec,
    FlowSpec,
    InitialAttribute,
    InvokeRpcRequest,
    RpcSpec,
    StartFlowRequest,
    StateDecl,
    StepSpec,
    StopFlowRequest,
    StreamWriteRequest,
    Task,
    TaskResult,
    WaitSpec,
    encoder,
)
from dex_server.app import ServerConfig, _Server, build_app
from dex_server.service import Runtime, _flows
from dex_server.store import Tx
from dex_server.store._contract import StreamRow
from dex_server.store._records import FlowRecord, StoredValue
from dex_server.store.postgres._store import PostgresStore
from dex_server.testing import (
    RunningServer,
    fresh_database,
)

from tests._pg import db_url, needs_postgres, until
from tests._rawworker import RawWorker, raw

__all__ = ["db_url"]  # a fixture, used by name

T = TypeVar("T")

SPEC = FlowSpec(
    flow_type="Chat",
    start_step="Wait",
    steps=[StepSpec(step_type="Wait", has_wait_for=True)],
    rpcs=[RpcSpec(name="say", is_transactional=True, has_input=True)],
    state=[
        StateDecl(name="prompt", kind="attribute"),
        StateDecl(name="notes", kind="attribute_map"),
        StateDecl(name="inbox", kind="channel"),
        StateDecl(name="tokens", kind="stream", stream_capacity_bytes=1 << 20),
    ],
)
# an agent's system prompt: the same large value in every run, kept as one shared blob
PROMPT = msgspec.json.encode("You are a careful assistant. " * 400)
PROMPT_HASH = hashlib.sha256(PROMPT).hexdigest()


needs_pg = needs_postgres


def start_body(flow_id: str, *, prompt: bool = False, notes: int = 0) -> bytes:
    attrs = [InitialAttribute(name="prompt", value=msgspec.Raw(PROMPT))] if prompt else []
    # written after the prompt: each is a statement between the prompt's write and COMMIT
    attrs += [InitialAttribute(name=f"notes/{i}", value=raw(i)) for i in range(notes)]
    return encoder.encode(
        StartFlowRequest(
            flow_type=SPEC.flow_type, flow_id=flow_id, spec=SPEC, initial_attributes=attrs
        )
    )


def stream_body(value: object, source: str = "client") -> bytes:
    return encoder.encode(StreamWriteRequest(source=source, value=raw(value)))


def dangling_blobs(url: str) -> list[str]:
    """Blob hashes that an attribute or a run's reference names but the blob table lacks."""
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT hash FROM blob_refs WHERE hash NOT IN (SELECT hash FROM blobs) UNION"
            " SELECT blob_hash FROM attributes WHERE blob_hash IS NOT NULL"
            " AND blob_hash NOT IN (SELECT hash FROM blobs)"
        ).fetchall()
    return [str(r[0]) for r in rows]


def waits_on_a_lock(url: str, server_id: str) -> bool:
    """Whether the writer connection of the store ``server_id`` waits for a lock now."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE datname = current_database()"
            " AND application_name = %s AND state = 'active'",
            (f"dex-test-{server_id}",),
        ).fetchall()
    return any(r[0] == "Lock" for r in rows)


# ---------------------------------------------------------------- two stores, exact points


@contextlib.asynccontextmanager
async def two_stores(url: str) -> AsyncIterator[tuple[PostgresStore, PostgresStore]]:
    """Two stores on one database, as two servers have; each writer is recognisable."""
    stores = [PostgresStore(url, server_id=name, fsync=False) for name in ("a", "b")]
    for s in stores:
        s.open()
        # name the writer's session, so a test can see it wait for a lock
        await s.run(_namer(f"dex-test-{s.server_id}"))
    try:
        yield stores[0], stores[1]
    finally:
        for s in stores:
            await s.close()


def _namer(name: str) -> Callable[[Tx], None]:
    def job(tx: Tx) -> None:
        tx.flows.run(f"SET application_name = '{name}'")  # type: ignore[attr-defined]

    return job


def _held(ready: threading.Event, go: threading.Event, job: Callable[[Tx], T]) -> Callable[[Tx], T]:
    """``job``, then hold its transaction open (uncommitted) until ``go``."""

    def held(tx: Tx) -> T:
        out = job(tx)
        ready.set()
        assert go.wait(60), "the test never let the held transaction commit"
        return out

    return held


async def blocked_or_done(url: str, store: PostgresStore, fut: asyncio.Future[Any]) -> None:
    await until(
        lambda: fut.done() or waits_on_a_lock(url, store.server_id),
        30,
        f"server {store.server_id} to finish or wait for a lock",
    )


def _closed_run(run_id: str, flow_id: str) -> FlowRecord:
    now = time.time()
    return FlowRecord(
        run_id=run_id,
        flow_id=flow_id,
        flow_type=SPEC.flow_type,
        status="completed",
        started_at=now,
        closed_at=now,
        retain_until=now - 1,
    )


def _write_prompt(tx: Tx, run_id: str) -> None:
    tx.blobs.put(PROMPT_HASH, PROMPT)
    tx.blobs.reference(run_id, PROMPT_HASH)
    tx.state.write(run_id, "prompt", StoredValue(blob=PROMPT_HASH, size=len(PROMPT)))


@needs_pg
async def test_retention_waits_for_a_writer_referencing_the_blob_it_would_delete(
    db_url: str,
) -> None:
    async with two_stores(db_url) as (a, b):

        def old_run(tx: Tx) -> None:
            tx.flows.insert(_closed_run("run-old", "f-old"))
            _write_prompt(tx, "run-old")

        await a.run(old_run)

        def new_run(tx: Tx) -> None:
            flow = _closed_run("run-new", "f-new")
            flow.status, flow.retain_until = "running", None
            tx.flows.insert(flow)
            _write_prompt(tx, "run-new")

        # server B references the stored prompt for a new run and has not committed yet
        ready, go = threading.Event(), threading.Event()
        writing = b.submit(_held(ready, go, new_run))
        await until(ready.is_set, 30, "server B's transaction to reference the blob")
        # server A's retention deletes the old run, the blob's only committed reference
        sweeping = a.submit(lambda tx: _flows.sweep(tx, time.time()))
        try:
            await blocked_or_done(db_url, a, sweeping)
        finally:
            go.set()
        await writing
        await sweeping
    assert dangling_blobs(db_url) == []
    # retention did delete the old run (and kept the blob the new one references)
    assert _count(db_url, "flows") == 1 and _count(db_url, "blobs") == 1


@needs_pg
async def test_two_servers_appending_to_one_stream_commit_in_sequence_order(
    db_url: str,
) -> None:
    key = (SPEC.flow_type, "tokens", "f-1")
    async with two_stores(db_url) as (a, b):

        def append(source: str) -> Callable[[Tx], int]:
            return lambda tx: tx.streams.append(
                key, source, msgspec.json.encode(source), time.time(), 1 << 20
            )

        # server A drew its sequence number and has not committed; server B appends next
        ready, go = threading.Event(), threading.Event()
        first = a.submit(_held(ready, go, append("a")))
        await until(ready.is_set, 30, "server A's transaction to append")
        second = b.submit(append("b"))
        read: list[str] = []
        token = 0
        try:
            await blocked_or_done(db_url, b, second)
            # a reader (on either server's read path) resumes after what it saw
            row = await b.read(_after(key, token))
            if row is not None:
                token = row[0]
                read.append(row[2])
        finally:
            go.set()
        await first
        await second
        while (row := await a.read(_after(key, token))) is not None:
            token = row[0]
            read.append(row[2])
    assert sorted(read) == ["a", "b"], f"the reader skipped a message: it read {read}"


def _after(key: tuple[str, str, str], token: int) -> Callable[[Tx], StreamRow | None]:
    return lambda tx: next(iter(tx.streams.after(key, token, 1)), None)


# ---------------------------------------------------------------- real servers


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


@needs_pg
async def test_retention_racing_new_runs_on_another_server_keeps_every_shared_blob(
    tmp_path: Path, db_url: str
) -> None:
    loops, rounds = 3, 100
    # server A sweeps all the time; server B writes the prompt for new runs, many in one
    # transaction (its group commit), while A deletes the runs of the round before
    a = RunningServer(
        tmp_path / "a",
        {
            "database_url": db_url,
            "fsync": False,
            "retention_s": 0.0,
            "retention_sweep_interval_s": 0.005,
        },
    )
    b = RunningServer(
        tmp_path / "b",
        {"database_url": db_url, "fsync": False, "retention_sweep_interval_s": 3600.0},
    )
    stop = encoder.encode(StopFlowRequest(type="cancel"))
    try:
        for s in (a, b):
            s.directory.mkdir()
            await s.start()
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=60) as ha,
            httpx.AsyncClient(base_url=b.url, timeout=60) as hb,
        ):

            async def start(flow_id: str) -> None:
                r = await hb.post("/v1/flows", content=start_body(flow_id, prompt=True, notes=100))
                assert r.status_code == 200, r.text

            async def close(flow_id: str) -> None:
                r = await ha.post(f"/v1/flows/{flow_id}/stop", content=stop)
                assert r.status_code == 200, r.text

            dangling: list[str] = []

            async def loop(k: int) -> None:
                # each run is swept soon after it closes, while the other loops start new
                # ones: the prompt's blob loses its last reference again and again
                for n in range(rounds):
                    await start(f"f-{k}-{n}")
                    # the next start would store a lost blob again: look while this run
                    # is the one that references it
                    dangling.extend(await asyncio.to_thread(dangling_blobs, db_url))
                    await close(f"f-{k}-{n}")

            await asyncio.gather(*map(loop, range(loops)))
            assert dangling == []
            # retention got to every run, and the blob went with the last one
            await until(lambda: _count(db_url, "flows") == 0, 60, "retention of every run")
            assert dangling_blobs(db_url) == []
            assert _count(db_url, "blobs") == 0
    finally:
        for s in (a, b):
            await s.stop()


def _count(url: str, table: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}".encode()).fetchone()
    assert row is not None
    return int(row[0])


@needs_pg
async def test_a_reader_on_a_third_server_reads_every_message_two_servers_write(
    tmp_path: Path, db_url: str
) -> None:
    per_writer, writers, readers = 60, 3, 4
    async with cluster(tmp_path, db_url, 3, fsync=False) as servers:
        https = [httpx.AsyncClient(base_url=s.url, timeout=60) for s in servers]
        try:
            # each server learns the Flow type (and its Stream) from a start through it
            for i, http in enumerate(https):
                r = await http.post("/v1/flows", content=start_body(f"learn-{i}"))
                assert r.status_code == 200, r.text
            path = f"/v1/streams/{SPEC.flow_type}/tokens/f-1"
            written = {
                f"{s}{w}-{n}" for s in "ab" for w in range(writers) for n in range(per_writer)
            }

            async def write(http: httpx.AsyncClient, who: str) -> None:
                # several writers per server: their appends share its transactions
                for n in range(per_writer):
                    r = await http.post(path, content=stream_body(f"{who}-{n}"))
                    assert r.status_code == 200, r.text

            async def read(http: httpx.AsyncClient) -> list[str]:
                seen: list[str] = []
                token = ""
                while len(seen) < len(written):
                    r = await http.get(
                        f"{path}/next", params={"resume_token": token, "timeout_s": 5}
                    )
                    msg = r.json().get("message")
                    if msg is None:
                        break  # nothing more arrives: the rest were skipped
                    seen.append(msg["value"])
                    token = msg["resume_token"]
                return seen

            reading = [asyncio.create_task(read(https[2])) for _ in range(readers)]
            await asyncio.gather(
                *(write(https[i], f"{s}{w}") for i, s in enumerate("ab") for w in range(writers))
            )
            seens = await asyncio.wait_for(asyncio.gather(*reading), 120)
        finally:
            for http in https:
                await http.aclose()
    for seen in seens:
        assert len(seen) == len(set(seen)), "a message was read twice"
        assert set(seen) == written, f"skipped: {sorted(written - set(seen))[:10]}"


# ---------------------------------------------------------------- in-process bookkeeping


@contextlib.asynccontextmanager
async def in_process(
    tmp_path: Path, database_url: str | None = None, **overrides: Any
) -> AsyncIterator[tuple[str, Runtime]]:
    """The real app under uvicorn on this event loop: ``(address, runtime)``.

    On ``database_url`` if given, else on the selected database.
    """
    with fresh_database() if database_url is None else contextlib.nullcontext(database_url) as url:
        config = ServerConfig(
            database_path=None if url else tmp_path / "dex.sqlite3",
            database_url=url,
            port=0,
            fsync=False,
            **overrides,
        )
        app = build_app(config)
        ready = asyncio.Event()
        server = _Server(
            uvicorn.Config(app, lifespan="on", ws="websockets-sansio", log_level="warning", port=0),
            [ready],
            None,
        )
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        serving = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            await asyncio.wait_for(ready.wait(), 30)
            yield server.address, app.state.runtime
        finally:
            server.should_exit = True
            await serving
            sock.close()


async def test_retention_frees_a_closed_flows_streams(tmp_path: Path) -> None:
    async with (
        in_process(tmp_path, retention_s=0.0, retention_sweep_interval_s=0.02) as (addr, rt),
        httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http,
    ):
        ids = [f"f-{i}" for i in range(20)]
        for fid in ids:
            assert (await http.post("/v1/flows", content=start_body(fid))).status_code == 200
            for n in range(3):
                path = f"/v1/streams/{SPEC.flow_type}/tokens/{fid}"
                assert (await http.post(path, content=stream_body(n))).status_code == 200
        keys = [(SPEC.flow_type, "tokens", fid) for fid in ids]
        pages = [await rt.streams.list_page(k, 1 << 20, 100, "") for k in keys]
        assert all(len(msgs) == 3 for msgs, _ in pages)
        stop = encoder.encode(StopFlowRequest(type="cancel"))
        for fid in ids:
            assert (await http.post(f"/v1/flows/{fid}/stop", content=stop)).status_code == 200
        await until(lambda: _all_gone(http, ids), 30, "retention of the Flows")

        async def no_messages() -> bool:
            pages = [await rt.streams.list_page(k, 1 << 20, 100, "") for k in keys]
            return all(not msgs for msgs, _ in pages)

        await until(no_messages, 30, "the Streams of the deleted Flows to go")
        if rt.store.kind == "sqlite":  # Streams in memory: nothing is kept for them
            assert rt.streams.stats()["streams"] == 0


async def _all_gone(http: httpx.AsyncClient, ids: list[str]) -> bool:
    for fid in ids:
        if (await http.get(f"/v1/flows/{fid}")).status_code != 404:
            return False
    return True


async def test_stream_reads_that_time_out_or_are_cancelled_leave_no_waiters(
    tmp_path: Path,
) -> None:
    async with (
        in_process(tmp_path) as (addr, rt),
        httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http,
    ):
        assert (await http.post("/v1/flows", content=start_body("f-1"))).status_code == 200
        base = f"/v1/streams/{SPEC.flow_type}/tokens"

        async def read(fid: str) -> None:
            r = await http.get(f"{base}/{fid}/next", params={"timeout_s": 0.05})
            assert r.status_code == 200 and r.json().get("message") is None

        # long polls on Streams nobody writes (of any Flow id), and on a written one
        for _ in range(5):
            await asyncio.gather(*(read(f"f-{i}") for i in range(20)))
        assert (await http.post(f"{base}/f-1", content=stream_body("x"))).status_code == 200
        r = await http.get(f"{base}/f-1/next", params={"timeout_s": 0.05})
        token = r.json()["message"]["resume_token"]
        r = await http.get(f"{base}/f-1/next", params={"resume_token": token, "timeout_s": 0.05})
        assert r.json().get("message") is None
        assert rt.streams.stats()["waiters"] == 0
        # a long poll that is cancelled (its request ended) leaves nothing either
        key = (SPEC.flow_type, "tokens", "f-2")
        polls = [asyncio.create_task(rt.streams.read_next(key, 1 << 20, "", 60)) for _ in range(5)]
        await until(lambda: rt.streams.stats()["waiters"] == 5, 30, "the long polls to wait")
        for p in polls:
            p.cancel()
        await asyncio.gather(*polls, return_exceptions=True)
        assert rt.streams.stats()["waiters"] == 0
        if rt.store.kind == "sqlite":  # Streams in memory: only the written one is kept
            assert rt.streams.stats()["streams"] == 1


async def chat(w: RawWorker, t: Task) -> TaskResult | None:
    if t.kind == "wait_for":
        cond = ConditionSpec(kind="channel", channel="inbox")
        return TaskResult(task_id=t.task_id, wait=WaitSpec(conditions=[cond]))
    # an RPC that answers without effects: the Flow keeps waiting for the next one
    return TaskResult(task_id=t.task_id, rpc_output=raw(True))


async def test_rpc_gates_are_freed_when_no_rpc_uses_them(tmp_path: Path) -> None:
    async with (
        in_process(tmp_path) as (addr, rt),
        RawWorker(addr, [SPEC], chat),
        httpx.AsyncClient(base_url=f"http://{addr}", timeout=60) as http,
    ):
        ids = [f"f-{i}" for i in range(25)]
        for fid in ids:
            assert (await http.post("/v1/flows", content=start_body(fid))).status_code == 200

        async def rpc(fid: str, n: int) -> None:
            body = encoder.encode(InvokeRpcRequest(rpc_name="say", input=raw(n)))
            r = await http.post(f"/v1/flows/{fid}/rpc", content=body)
            assert r.status_code == 200 and r.json() == {"output": True}, r.text

        # transactional RPCs on many runs, several at once on one run
        await asyncio.gather(*(rpc(fid, n) for fid in ids for n in range(2)))
        await asyncio.gather(*(rpc(ids[0], n) for n in range(6)))
        assert rt._rpc_gates == {}


@needs_pg
async def test_an_rpc_cancelled_while_it_frees_its_keys_leaves_its_run_usable(
    tmp_path: Path, db_url: str
) -> None:
    answer = asyncio.Event()
    asked = asyncio.Event()

    async def slow(w: RawWorker, t: Task) -> TaskResult | None:
        if t.kind == "rpc":
            asked.set()
            await answer.wait()
        return await chat(w, t)

    async with (
        in_process(tmp_path, db_url) as (addr, rt),
        RawWorker(addr, [SPEC], slow),
        httpx.AsyncClient(base_url=f"http://{addr}", timeout=60) as http,
    ):
        assert (await http.post("/v1/flows", content=start_body("f-1"))).status_code == 200
        call = asyncio.create_task(rt.invoke_rpc("f-1", InvokeRpcRequest(rpc_name="say")))
        await until(asked.is_set, 30, "the Worker to get the RPC")
        # the caller goes away, and is cancelled again at every step of its cleanup (on
        # PostgreSQL that cleanup waits for the store to free the run's commit hold)
        while not call.done():
            call.cancel()
            await asyncio.sleep(0)
        answer.set()
        assert rt._rpc_gates == {}
        body = encoder.encode(InvokeRpcRequest(rpc_name="say", input=raw(1)))
        r = await asyncio.wait_for(http.post("/v1/flows/f-1/rpc", content=body), 30)
        assert r.status_code == 200 and r.json() == {"output": True}, r.text
