from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from dex_server.app import ServerConfig
from dex_server.store import FlowRecord, SqliteStore, Tx
from dex_server.store.sqlite import _store, apply_migrations


def test_migrations_are_idempotent(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    assert apply_migrations(conn) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert apply_migrations(conn) == []
    assert conn.execute("SELECT version FROM schema_version").fetchall() == [
        (1,),
        (2,),
        (3,),
        (4,),
        (5,),
        (6,),
        (7,),
        (8,),
        (9,),
        (10,),
    ]


async def test_group_commit_and_restart(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db")
    store.open()

    def make(i: int):  # type: ignore[no-untyped-def]
        return lambda tx: tx.flows.insert(
            FlowRecord(run_id=f"r{i:03}", flow_id=f"f{i}", flow_type="T", started_at=float(i))
        )

    await asyncio.gather(*(store.run(make(i)) for i in range(200)))
    assert store.jobs == 200 and store.batches < 200

    def boom(tx: object) -> None:
        raise ValueError("job fails alone")

    ok = store.submit(make(500))
    bad = store.submit(boom)
    await ok
    try:
        await bad
    except ValueError:
        pass
    await store.close()
    store2 = SqliteStore(tmp_path / "db")
    store2.open()
    flows = await store2.run(
        lambda tx: tx.flows.page(flow_type="T", status=None, limit=1000, before_run_id=None)
    )
    assert len(flows) == 201
    await store2.close()


async def _checkpoint_pass(store: SqliteStore) -> None:
    seen = store.checkpoint_passes
    deadline = asyncio.get_running_loop().time() + 20
    while store.checkpoint_passes == seen:
        assert asyncio.get_running_loop().time() < deadline, "no checkpoint pass in 20 s"
        await store.run(lambda tx: None)


async def test_wal_restarts_under_sustained_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "_WAL_RESTART_FRAMES", 32)
    monkeypatch.setattr(_store, "_CHECKPOINT_EVERY_BATCHES", 4)
    store = SqliteStore(tmp_path / "db")
    store.open()
    rows = 600
    for i in range(rows):  # one job per transaction: each appends at least one 4 KiB frame
        flow = FlowRecord(
            run_id=f"r{i:04}", flow_id=f"{i:04}" + "x" * 3000, flow_type="T", started_at=0
        )
        await store.run(lambda tx, f=flow: tx.flows.insert(f))  # type: ignore[misc]
        if i % 50 == 49:
            # the checkpointer is a thread: on a loaded machine it may run late, so let
            # each stretch of writes see at least one of its passes (it wakes every 4 batches)
            await _checkpoint_pass(store)
    wal = (tmp_path / "db-wal").stat().st_size
    await store.close()
    # a row writes about six 4 KiB frames (its long key overflows, in the table and in its
    # index): without restarts the WAL would hold them all, about 15 MB; a restart missed
    # now and then (the checkpointer copying at that moment) leaves it at 1-2 MB
    assert wal < rows * 4096 * 2
    conn = sqlite3.connect(tmp_path / "db")
    assert conn.execute("SELECT count(*) FROM flows").fetchone() == (rows,)


def _flow(i: int) -> FlowRecord:
    return FlowRecord(run_id=f"r{i:04}", flow_id=f"f{i:04}", flow_type="T", started_at=0)


async def _insert_flows(store: SqliteStore, count: int) -> None:
    for i in range(count):  # one transaction each
        flow = _flow(i)
        await store.run(lambda tx, f=flow: tx.flows.insert(f))  # type: ignore[misc]


def _crash_image(folder: Path, into: Path) -> Path:
    """Copy the database and its WAL as a SIGKILL would leave them (the WAL not copied back)."""
    into.mkdir()
    for name in ("db", "db-wal"):
        (into / name).write_bytes((folder / name).read_bytes())
    return into / "db"


def _flow_count(path: Path) -> int:
    conn = sqlite3.connect(path)
    try:
        (count,) = conn.execute("SELECT count(*) FROM flows").fetchone()
        return int(count)
    finally:
        conn.close()


async def test_zeros_are_written_ahead_of_a_busy_wal_and_read_as_its_empty_tail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "_WAL_AHEAD_BYTES", 64 * 1024)
    monkeypatch.setattr(_store, "_CHECKPOINT_EVERY_BATCHES", 4)
    (tmp_path / "a").mkdir()
    store = SqliteStore(tmp_path / "a" / "db")
    store.open()
    wal = tmp_path / "a" / "db-wal"
    await _insert_flows(store, 40)
    await _checkpoint_pass(store)
    await store.run(lambda tx: tx.flows.insert(_flow(40)))  # written over zeros
    image = _crash_image(tmp_path / "a", tmp_path / "image")
    size = wal.stat().st_size
    await store.close()
    # the tail past the last frame is zeros, and recovery of the crash image stops there
    data = (tmp_path / "image" / "db-wal").read_bytes()
    assert size == len(data) and data.endswith(bytes(32 * 1024))
    assert _flow_count(image) == 41


async def test_no_zeros_ahead_for_a_quiet_wal_or_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_store, "_CHECKPOINT_EVERY_BATCHES", 4)
    for name, fsync in (("quiet", True), ("no-fsync", False)):
        (tmp_path / name).mkdir()
        if not fsync:
            monkeypatch.setattr(_store, "_WAL_AHEAD_BYTES", 64 * 1024)
        store = SqliteStore(tmp_path / name / "db", fsync=fsync)
        store.open()
        await _insert_flows(store, 40)
        await _checkpoint_pass(store)
        image = _crash_image(tmp_path / name, tmp_path / f"{name}-image")
        await store.close()
        data = (image.parent / "db-wal").read_bytes()
        # frames only: the header and whole 4 KiB pages with their 24-byte headers
        assert (len(data) - 32) % (24 + 4096) == 0 and not data.endswith(bytes(4096)), name
        assert _flow_count(image) == 40


async def test_a_few_inline_jobs_commit_on_the_loop_thread_and_many_go_to_the_writer(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "db")
    store.open()
    loop_thread = threading.get_ident()
    order: list[str] = []

    def job(name: str):  # type: ignore[no-untyped-def]
        def run(tx: object) -> int:
            order.append(name)
            return threading.get_ident()

        return run

    try:
        # alone in its loop iteration, with the writer idle: committed right here
        assert await store.submit(job("lone"), inline=True) == loop_thread
        # a few in one iteration (the results of one Worker message): one transaction here
        few = [store.submit(job(f"few-{i}"), inline=True) for i in range(3)]
        assert await asyncio.gather(*few) == [loop_thread] * 3
        batches = store.batches
        # ...counted as three jobs: the writer is idle again, so a lone one still runs here
        assert await store.submit(job("lone-again"), inline=True) == loop_thread
        assert store.batches == batches + 1
        # more than that in one iteration (load): the writer takes them
        many = [
            store.submit(job(f"many-{i}"), inline=True) for i in range(_store._INLINE_MAX_JOBS + 1)
        ]
        threads = await asyncio.gather(*many)
        assert all(t != loop_thread for t in threads)
        # an ordinary job submitted after an inline one runs after it
        first = store.submit(job("inline-first"), inline=True)
        second = store.submit(job("queued-second"))
        await asyncio.gather(first, second)
        assert order[-2:] == ["inline-first", "queued-second"]

        # an inline job that fails rolls back alone and raises to its caller
        def boom(tx: object) -> None:
            raise ValueError("inline job fails")

        with pytest.raises(ValueError, match="inline job fails"):
            await store.submit(boom, inline=True)
        assert store.jobs == 8 + _store._INLINE_MAX_JOBS + 1
    finally:
        await store.close()


async def test_inline_jobs_moved_to_the_writer_leave_no_empty_transaction(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStore(tmp_path / "db")
    store.open()
    sizes: list[int] = []
    run_batch = store._run_batch

    def counted(conn, tx, batch, *, inline=False):  # type: ignore[no-untyped-def]
        sizes.append(len(batch))
        run_batch(conn, tx, batch, inline=inline)

    monkeypatch.setattr(store, "_run_batch", counted)
    try:
        # the ordinary job sends the inline one to the writer ahead of it; the inline
        # flush scheduled for it then finds nothing to run
        first = store.submit(lambda tx: 1, inline=True)
        second = store.submit(lambda tx: 2)
        # hold the loop until the writer committed both, so that the flush finds it idle
        deadline = time.monotonic() + 20
        while store._finished < 2:
            assert time.monotonic() < deadline, "the writer never ran the two jobs"
            time.sleep(0.001)
        assert list(await asyncio.gather(first, second)) == [1, 2]
        assert await store.submit(lambda tx: 3, inline=True) == 3
        assert sum(sizes) == 3 and 0 not in sizes, sizes
    finally:
        await store.close()


async def test_the_page_cache_of_every_connection_is_bounded_as_configured(
    tmp_path: Path,
) -> None:
    # the page cache is what a large SQLite store adds to the server's memory
    store = SqliteStore(tmp_path / "db", cache_mib=3)
    store.open()
    try:

        def cache_size(tx: object) -> int:
            return int(store._conn.execute("PRAGMA cache_size").fetchone()[0])  # type: ignore[union-attr]

        assert await store.run(cache_size) == -3 * 1024
    finally:
        await store.close()
    default = SqliteStore(tmp_path / "db2")
    assert default.cache_mib == 16
    with pytest.raises(ValueError, match="sqlite_cache_mib must be at least 1"):
        ServerConfig(database_path=tmp_path / "db3", sqlite_cache_mib=0)


async def _until_the_writer_runs_it(store: SqliteStore) -> None:
    """Wait until the writer took the only queued job and holds the connection for it."""
    deadline = time.monotonic() + 10
    while store._queue.qsize() or not store._conn_lock.locked():
        assert time.monotonic() < deadline, "the writer did not take the job"
        await asyncio.sleep(0.001)


def _open_journal_files() -> list[str]:
    """The temporary files SQLite holds open in this process (its journals that spilled)."""
    fds = Path("/proc/self/fd")
    names = []
    for fd in fds.iterdir():
        try:
            target = fd.readlink()
        except OSError:
            continue
        if "etilqs_" in target.name:
            names.append(str(target))
    return names


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
async def test_jobs_that_change_many_pages_in_one_batch_keep_their_journals_in_memory(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "db")
    store.open()
    conn = store._conn
    assert conn is not None
    try:

        def setup(tx: object) -> None:
            conn.execute("CREATE TABLE scratch (k INTEGER PRIMARY KEY, v BLOB NOT NULL)")
            conn.executemany(
                "INSERT INTO scratch (k, v) VALUES (?, ?)", [(k, bytes(1000)) for k in range(400)]
            )

        await store.run(setup)
        seen: list[list[str]] = []

        def rewrite(fill: int):  # type: ignore[no-untyped-def]
            def run(tx: object) -> None:
                # about a hundred pages changed by one statement of a batch (its journal)
                conn.execute("UPDATE scratch SET v = ?", (bytes([fill]) * 1000,))
                seen.append(_open_journal_files())

            return run

        await _one_batch(store, [rewrite(i) for i in range(1, 4)])
        assert len(seen) == 3
        assert seen == [[], [], []], f"a journal went to a temporary file: {seen}"
    finally:
        await store.close()


async def test_a_job_submitted_alone_runs_in_a_transaction_of_its_own(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db")
    store.open()
    try:
        gate = threading.Event()
        batch_of: dict[str, int] = {}

        def blocker(tx: object) -> None:
            gate.wait(10)

        def job(name: str, fail: bool = False):  # type: ignore[no-untyped-def]
            def run(tx: object) -> str:
                batch_of[name] = store.batches  # counts the transactions committed before
                if fail:
                    raise ValueError(name)
                return name

            return run

        first = store.submit(blocker)
        await _until_the_writer_runs_it(store)
        before = [store.submit(job("a1")), store.submit(job("a2"))]
        big = store.submit(job("big"), alone=True)
        after = [store.submit(job("b1")), store.submit(job("b2"))]
        lone_failure = store.submit(job("bad", fail=True), alone=True)
        last = store.submit(job("c1"))
        gate.set()
        await first
        assert await asyncio.gather(*before, big, *after) == ["a1", "a2", "big", "b1", "b2"]
        with pytest.raises(ValueError, match="bad"):
            await lone_failure
        assert await last == "c1"
        # the jobs around it share their batches; it has one to itself, in queue order
        assert batch_of["a1"] == batch_of["a2"] < batch_of["big"] < batch_of["b1"]
        assert batch_of["b1"] == batch_of["b2"] < batch_of["bad"] < batch_of["c1"]
        # and an inline submission of it still waits its turn on the writer
        assert await store.submit(job("inline-alone"), inline=True, alone=True) == "inline-alone"
    finally:
        await store.close()


async def _one_batch(store: SqliteStore, jobs: list[Callable[[Tx], None]]) -> list[object]:
    """Run ``jobs`` as one batch: queued while the writer holds a job that waits for them."""
    gate = threading.Event()
    first = store.submit(lambda tx: gate.wait(10))
    await _until_the_writer_runs_it(store)
    futures = [store.submit(job) for job in jobs]
    gate.set()
    await first
    return await asyncio.gather(*futures, return_exceptions=True)


def _run_ids(path: Path) -> list[str]:
    conn = sqlite3.connect(path)
    try:
        return [r[0] for r in conn.execute("SELECT run_id FROM flows ORDER BY run_id")]
    finally:
        conn.close()


async def test_a_batch_whose_jobs_all_succeed_runs_without_savepoints(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db")
    store.open()
    conn = store._conn
    assert conn is not None
    statements: list[str] = []
    try:
        conn.set_trace_callback(statements.append)  # called on the writer thread
        batches = store.batches
        jobs = [lambda tx, i=i: tx.flows.insert(_flow(i)) for i in range(5)]
        assert await _one_batch(store, jobs) == [True] * 5  # type: ignore[arg-type]
        assert store.batches == batches + 2  # the job that held the writer, then the five
        assert store.careful_batches == 0
        assert not [s for s in statements if "SAVEPOINT" in s or "RELEASE" in s], statements
    finally:
        conn.set_trace_callback(None)
        await store.close()
    assert _run_ids(tmp_path / "db") == [f"r{i:04}" for i in range(5)]


async def test_a_job_failing_in_a_batch_undoes_only_its_own_writes(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "db")
    store.open()
    runs: dict[int, int] = {}

    def insert(i: int) -> Callable[[Tx], None]:
        def job(tx: Tx) -> None:
            runs[i] = runs.get(i, 0) + 1
            tx.flows.insert(_flow(i))

        return job

    def boom(tx: Tx) -> None:
        tx.flows.insert(_flow(99))
        raise ValueError("this job fails")

    try:
        first, failed, last = await _one_batch(store, [insert(1), boom, insert(2)])
        assert first is None and last is None  # the jobs return nothing
        assert isinstance(failed, ValueError)
        assert store.careful_batches == 1
        # the first job ran twice (its first run was rolled back with the failing job's
        # writes); the last ran once, after the batch started over job by job
        assert runs == {1: 2, 2: 1}
    finally:
        await store.close()
    assert _run_ids(tmp_path / "db") == ["r0001", "r0002"]
