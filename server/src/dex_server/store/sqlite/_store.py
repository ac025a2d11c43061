from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import queue
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from dex_server.store._contract import StoreNotWritableError, Tx
from dex_server.store._groups import Item as _Item
from dex_server.store._groups import Outcome, each_in_savepoint
from dex_server.store._migrations import apply_migrations as run_migrations
from dex_server.store._migrations import statements, verify_schema
from dex_server.store._search import SQLITE, SearchRepo
from dex_server.store.sqlite._cluster_repos import (
    SqliteClaims,
    SqliteLocks,
    SqliteRpcCalls,
    SqliteServers,
    SqliteSignals,
    SqliteStreams,
)
from dex_server.store.sqlite._repos import (
    SqliteBlobs,
    SqliteChannels,
    SqliteExecutions,
    SqliteFlows,
    SqliteHistory,
    SqliteRpcRequests,
    SqliteSpecs,
    SqliteState,
    SqliteTimers,
)

T = TypeVar("T")
log = logging.getLogger("dex_server.store")

_MAX_BATCH = 512
# inline jobs of one loop iteration that may still run on the loop (a frame of results)
_INLINE_MAX_JOBS = 8
# The writer does not auto-checkpoint (a checkpoint on the commit path stalls every Step
# behind it); a checkpointer thread with its own connection copies the WAL back in the
# background after this many commits, or after _CHECKPOINT_IDLE_S. Under sustained load
# that copy never catches up with the writer, so the WAL could not restart and would grow
# without bound: once it holds _WAL_RESTART_FRAMES, the writer checkpoints the (short,
# not yet copied) tail itself between two transactions, and its next transaction starts
# the WAL over from the beginning.
_CHECKPOINT_EVERY_BATCHES = 64
_CHECKPOINT_IDLE_S = 1.0
_WAL_RESTART_FRAMES = 4096
_WAL_SIZE_LIMIT_BYTES = 64 * 1024 * 1024
# With fsync on, a commit that appends past the WAL file's end also changes the file's
# size, and its fdatasync then waits for a journal commit of the file system as well:
# measured here, 0.29 against 0.19 ms and 3.3 against 2.1 context switches per commit.
# Past its first cycle the WAL restarts from its beginning and every commit overwrites; in
# the first, the checkpointer keeps _WAL_AHEAD_BYTES of zeros written past the last frame
# once the WAL holds half that (a store that writes less never pays for them), up to 5/4 of
# _WAL_RESTART_FRAMES. Recovery stops at the first frame whose salt does not match the
# header, so the zeros read as an empty tail.
_WAL_AHEAD_BYTES = 4 * 1024 * 1024


class _Alone:
    """A job that runs in a transaction of its own (``SqliteStore.submit(alone=True)``)."""

    __slots__ = ("job",)

    def __init__(self, job: Callable[[Tx], Any]) -> None:
        self.job = job

    def __call__(self, tx: Tx) -> Any:
        return self.job(tx)


class DataFolderInUseError(RuntimeError):
    """Another server process holds the SQLite store's data folder.

    Attributes:
        folder: the data folder.
        pid: the process holding it, when its lock file names one.

    """

    def __init__(self, folder: Path, lock_file: Path, pid: int | None) -> None:
        holder = f"another Dex server (PID {pid})" if pid else "another Dex server"
        super().__init__(
            f"the data folder {folder} is in use by {holder}: one server per SQLite store "
            f"(lock file {lock_file.name}); stop that server or use another data folder"
        )
        self.folder = folder
        self.pid = pid


class _FolderLock:
    """An OS lock on ``<database>.lock`` (flock / msvcrt), held while the store is open.

    The operating system frees it when the process ends, however it ends, so a crashed
    server never leaves its folder locked. The file names the holder's PID after a first
    byte that is the locked region on Windows.
    """

    def __init__(self, database: Path) -> None:
        self.path = database.with_name(database.name + ".lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreNotWritableError(
                f"cannot open the lock file {self.path}: {exc.strerror or exc}"
            ) from None
        try:
            _lock(fd)
        except OSError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataFolderInUseError(self.path.parent, self.path, pid) from None
        os.ftruncate(fd, 1)
        os.lseek(fd, 1, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)  # closing the descriptor frees the lock


if sys.platform == "win32":
    import msvcrt

    def _lock(fd: int) -> None:
        os.lseek(fd, 0, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)

else:
    import fcntl

    def _lock(fd: int) -> None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)


def _read_pid(fd: int) -> int | None:
    try:
        os.lseek(fd, 1, os.SEEK_SET)
        text = os.read(fd, 32).decode(errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _connect(path: Path, *, fsync: bool, cache_mib: int) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={'FULL' if fsync else 'NORMAL'}")
    conn.execute("PRAGMA foreign_keys=OFF")
    conn.execute("PRAGMA busy_timeout=10000")
    # bounded: a large store's pages otherwise pile up in every connection's cache
    conn.execute(f"PRAGMA cache_size=-{int(cache_mib) * 1024}")
    return conn


class _SqliteMigrationDb:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def ensure_version_table(self) -> None:
        self.c.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY,"
            " name TEXT NOT NULL, applied_at REAL NOT NULL)"
        )

    def begin_locked(self) -> None:
        self.c.execute("BEGIN IMMEDIATE")

    def applied(self) -> set[int]:
        return {r[0] for r in self.c.execute("SELECT version FROM schema_version")}

    def execute_script(self, sql: str) -> None:
        pending = ""
        for piece in statements(sql):
            pending += piece + ";"
            # a trigger's body holds several statements: run it once it is whole
            if sqlite3.complete_statement(pending):
                self.c.execute(pending)
                pending = ""
        if pending:
            raise RuntimeError("a migration ends inside a trigger body")

    def record(self, version: int, name: str, applied_at: float) -> None:
        self.c.execute(
            "INSERT INTO schema_version (version, name, applied_at) VALUES (?,?,?)",
            (version, name, applied_at),
        )

    def commit(self) -> None:
        self.c.execute("COMMIT")

    def rollback(self) -> None:
        if self.c.in_transaction:
            self.c.execute("ROLLBACK")


def apply_migrations(conn: sqlite3.Connection) -> list[int]:
    """Apply every migration newer than the recorded ``schema_version``; return those applied.

    Each migration runs in its own ``BEGIN IMMEDIATE`` transaction together with its
    version row, so concurrent runners and restarts apply each one exactly once.
    """
    return run_migrations(_SqliteMigrationDb(conn), "sqlite")


class SqliteStore:
    """SQLite store on one dedicated writer thread with group commit.

    Jobs (``Callable[[Tx], T]``) are queued to the writer thread. Jobs that arrive while a
    commit is in progress run together in the next transaction; a job that raises rolls
    back only itself (the batch then runs again with a savepoint per job, see
    ``_run_batch``), and every caller's future resolves after the COMMIT. Jobs must
    therefore be repeatable. Reads go through the same thread, so they see every committed
    job. WAL checkpoints run on a separate checkpointer thread (its own connection), so
    the commit path never copies the WAL back; the writer only checkpoints the uncopied
    tail itself when the WAL has grown large, so that it can start over (see
    ``_WAL_RESTART_FRAMES``).

    ``submit(job, inline=True)`` runs the job (and its COMMIT) on the event loop thread
    instead, at the end of the loop iteration, when the iteration has at most
    ``_INLINE_MAX_JOBS`` such jobs and nothing is queued or running: the result of a lone
    Step, or the parallel results one Worker message carries, then skip the hand-off to
    the writer and back (two thread wake-ups). Under load the jobs go to the writer as
    before. A lock keeps the connection to one thread at a time, and jobs still
    run in the order they were submitted.

    ``submit(job, alone=True)`` runs the job in a transaction of its own, never in a batch,
    so that no savepoint journals what it changes (for jobs that may change many pages).

    ``read(job)`` is a second path for read-only jobs on a hot path (a running task reading
    state on demand): a reader thread with its own connection runs them in a read
    transaction, so they neither queue behind the writer nor wait for its commits, and
    see every transaction committed before they start.
    """

    kind = "sqlite"
    shared = False

    def __init__(
        self,
        path: Path,
        *,
        fsync: bool = True,
        verify_only: bool = False,
        server_id: str = "local",
        cache_mib: int = 16,
    ) -> None:
        self.server_id = server_id
        self.path = path
        self.fsync = fsync
        self.cache_mib = cache_mib
        self.verify_only = verify_only
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: sqlite3.Connection | None = None
        self._checkpointer: threading.Thread | None = None
        self._checkpoint_wake = threading.Event()
        self._stopping = False
        self._restart_due = False
        self._wal_frame_bytes = 24 + 4096
        self._reader_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._reader: tuple[sqlite3.Connection, Tx] | None = None
        self.batches = 0
        # background checkpoint passes run (tests wait on it instead of on the clock)
        self.checkpoint_passes = 0
        self.jobs = 0
        self.careful_batches = 0  # batches run again job by job after one of their jobs failed
        self.submitted = 0
        self._folder_lock = _FolderLock(path)
        # the connection's owner for one batch (the writer, or the loop running inline); a
        # job may run inline only when every job submitted before it has finished
        self._conn_lock = threading.Lock()
        self._submitted = 0  # written by the event loop thread only
        self._finished = 0  # written under _conn_lock only
        self._tx: Tx | None = None
        # inline jobs submitted in this loop iteration (see _flush_inline)
        self._inline: list[_Item] = []

    def acquire(self) -> None:
        """Lock the data folder for this process (until :meth:`release` or its exit).

        Raises:
            DataFolderInUseError: another server holds it.

        """
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreNotWritableError(
                f"cannot create the data folder {self.path.parent}: {exc.strerror or exc}"
            ) from None
        self._folder_lock.acquire()

    def check_writable(self) -> None:
        """Open the database, apply (or verify) migrations and try a write, then close.

        Blocking; the server runs it before it listens, holding the folder lock, so that an
        unusable store is one clear error instead of a failed startup.

        Raises:
            StoreNotWritableError: the database cannot be opened or written (read-only
                file or folder, not a database, disk full...).
            SchemaBehindError: ``verify_only`` and the schema lacks migrations.

        """
        try:
            conn = _connect(self.path, fsync=self.fsync, cache_mib=self.cache_mib)
        except sqlite3.Error as exc:
            msg = f"cannot open the SQLite store {self.path}: {exc}"
            raise StoreNotWritableError(msg) from None
        try:
            db = _SqliteMigrationDb(conn)
            if self.verify_only:
                verify_schema(db, "sqlite")
            else:
                apply_migrations(conn)
            # a write that is rolled back: a read-only file refuses it here
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(
                "INSERT INTO schema_version (version, name, applied_at) VALUES (-1, 'probe', 0)"
            )
            conn.execute("ROLLBACK")
        except sqlite3.Error as exc:
            msg = f"cannot write the SQLite store {self.path}: {exc}"
            raise StoreNotWritableError(msg) from None
        finally:
            conn.close()

    def release(self) -> None:
        self._folder_lock.release()

    def open(self) -> None:
        """Lock the data folder, open the database, apply migrations, start the writer."""
        self.acquire()
        self._conn = _connect(self.path, fsync=self.fsync, cache_mib=self.cache_mib)
        if self.verify_only:
            verify_schema(_SqliteMigrationDb(self._conn), "sqlite")
        else:
            apply_migrations(self._conn)
        self._conn.execute("PRAGMA wal_autocheckpoint=0")
        # Statement and savepoint journals in memory: at the default (a file) SQLite moves
        # one past 64 KiB to a temporary file, created, written and deleted in most
        # transactions of a Worker message's results (a savepoint each); about a seventh of
        # an agent turn's store time. Such a journal holds the pages a job changes, so a job
        # that may change very many (the retention sweep) is submitted ``alone``.
        self._conn.execute("PRAGMA temp_store=MEMORY")
        self._conn.execute(f"PRAGMA journal_size_limit={_WAL_SIZE_LIMIT_BYTES}")
        (page_size,) = self._conn.execute("PRAGMA page_size").fetchone()
        self._wal_frame_bytes = 24 + int(page_size)
        self._loop = asyncio.get_running_loop()
        self._stopping = False
        self._tx = _repos(self._conn, self.server_id)
        self._submitted = self._finished = 0
        self._thread = threading.Thread(target=self._run, name="dex-store-writer", daemon=True)
        self._thread.start()
        self._checkpointer = threading.Thread(
            target=self._checkpoint_loop, name="dex-store-checkpointer", daemon=True
        )
        self._checkpointer.start()
        self._reader_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="dex-store-reader"
        )

    def describe(self) -> str:
        return f"sqlite {self.path}"

    def start_signals(self, on_signal: Callable[[str, str], None]) -> None:
        """One server per SQLite file: there are no other servers to hear from."""

    async def close(self) -> None:
        """Finish queued jobs, stop the writer thread and close the database."""
        if self._thread is None:
            return
        if self._reader_pool is not None:
            pool, self._reader_pool = self._reader_pool, None
            await asyncio.get_running_loop().run_in_executor(pool, self._close_reader)
            pool.shutdown(wait=True)
        self._queue_inline()
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)
        self._thread = None
        self._stopping = True
        self._checkpoint_wake.set()
        if self._checkpointer is not None:
            await asyncio.to_thread(self._checkpointer.join)
            self._checkpointer = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        self.release()

    def submit(
        self, job: Callable[[Tx], T], *, inline: bool = False, alone: bool = False
    ) -> asyncio.Future[T]:
        """Queue ``job`` for the writer; the future resolves after its transaction commits.

        ``inline``: it may run on this thread instead (see the class). ``alone``: it runs
        in a transaction of its own (``inline`` is then ignored).
        """
        loop = self._loop
        assert loop is not None, "store is not open"
        fut: asyncio.Future[T] = loop.create_future()
        self.submitted += 1
        if alone:
            job = _Alone(job)
        elif inline:
            if not self._inline:
                loop.call_soon(self._flush_inline)
            self._inline.append((job, fut))
            return fut
        self._queue_inline()  # jobs submitted earlier run earlier
        self._submitted += 1
        self._queue.put((job, fut))
        return fut

    def _flush_inline(self) -> None:
        """Run this loop iteration's inline jobs here, in one transaction, if the writer is idle.

        A few jobs come from one Worker message (a run's parallel results); more than
        ``_INLINE_MAX_JOBS`` mean load: they go to the writer as one batch, so that its
        group commit goes on while this thread serves the sockets.
        """
        conn, tx, jobs = self._conn, self._tx, self._inline
        if not jobs:  # a job submitted after them sent them to the writer
            return
        if (
            len(jobs) <= _INLINE_MAX_JOBS
            and conn is not None
            and tx is not None
            and self._submitted == self._finished
            and self._conn_lock.acquire(blocking=False)
        ):
            self._inline = []
            try:
                if self._submitted == self._finished:  # the writer may have taken one
                    self._submitted += len(jobs)
                    self._run_batch(conn, tx, jobs, inline=True)
                    return
            finally:
                self._conn_lock.release()
            self._inline = jobs
        self._queue_inline()

    def _queue_inline(self) -> None:
        jobs, self._inline = self._inline, []
        for item in jobs:
            self._submitted += 1
            self._queue.put(item)

    async def run(self, job: Callable[[Tx], T], *, alone: bool = False) -> T:
        """Run ``job`` in a transaction and return its result (``alone``: see ``submit``)."""
        return await self.submit(job, alone=alone)

    async def read(self, job: Callable[[Tx], T]) -> T:
        """Run the read-only ``job`` on the reader thread and return its result.

        The job must not write. It sees one consistent snapshot of everything committed
        before it started.
        """
        assert self._reader_pool is not None, "store is not open"
        return await asyncio.get_running_loop().run_in_executor(
            self._reader_pool, self._read_job, job
        )

    def _read_job(self, job: Callable[[Tx], T]) -> T:
        if self._reader is None:
            conn = _connect(self.path, fsync=self.fsync, cache_mib=self.cache_mib)
            self._reader = (conn, _repos(conn, self.server_id))
        conn, tx = self._reader
        state = tx.state
        assert isinstance(state, SqliteState)
        conn.execute("BEGIN")
        try:
            result = job(tx)
        except BaseException:
            state.drop_later()
            raise
        finally:
            conn.execute("ROLLBACK")
        state.run_later()
        return result

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader[0].close()
            self._reader = None

    def _run(self) -> None:
        conn = self._conn
        assert conn is not None
        tx = self._tx
        assert tx is not None
        stopping = False
        carried: _Item | None = None
        while not stopping:
            item = carried if carried is not None else self._queue.get()
            carried = None
            if item is None:
                break
            batch = [item]
            while len(batch) < _MAX_BATCH and not isinstance(batch[0][0], _Alone):
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                if isinstance(nxt[0], _Alone):
                    carried = nxt  # the next transaction, once this batch committed
                    break
                batch.append(nxt)
            with self._conn_lock:
                self._run_batch(conn, tx, batch)

    def _restart_wal(self, conn: sqlite3.Connection) -> None:
        try:
            busy, log_frames, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.Error:
            log.warning("WAL checkpoint failed", exc_info=True)
            return
        # busy: the checkpointer was copying at the same time; try again after the next batch
        self._restart_due = bool(busy) or done < log_frames

    def _checkpoint_loop(self) -> None:
        conn = _connect(self.path, fsync=self.fsync, cache_mib=self.cache_mib)
        try:
            while not self._stopping:
                self._checkpoint_wake.wait(_CHECKPOINT_IDLE_S)
                self._checkpoint_wake.clear()
                if self._stopping:
                    break
                try:
                    # PASSIVE never blocks the writer; the WAL restarts from its beginning
                    # at the writer's next transaction once everything was copied back.
                    _, log_frames, _ = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    if log_frames >= _WAL_RESTART_FRAMES:
                        self._restart_due = True
                    if self.fsync:
                        self._write_wal_ahead(log_frames)
                    self.checkpoint_passes += 1
                except sqlite3.Error:
                    log.warning("WAL checkpoint failed", exc_info=True)
        finally:
            conn.close()

    def _write_wal_ahead(self, log_frames: int) -> None:
        """Keep zeros written past the WAL's last frame, in its first cycle (see above).

        The zeros go past the file's end with the writer stopped (``_conn_lock``), so they
        never land on a frame; their flush runs after it goes on. A failure (a full disk)
        costs only the speed-up.
        """
        frame = self._wal_frame_bytes
        used = 32 + log_frames * frame
        limit = 32 + _WAL_RESTART_FRAMES * 5 // 4 * frame
        if used < _WAL_AHEAD_BYTES // 2:
            return
        wal = f"{self.path}-wal"
        try:
            fd = os.open(wal, os.O_WRONLY)
        except OSError as exc:  # gone (the store closes) or not writable: no speed-up
            log.debug("not writing zeros ahead in %s: %s", wal, exc)
            return
        try:
            start = os.fstat(fd).st_size
            if start >= limit or start - used >= _WAL_AHEAD_BYTES // 2:
                return
            with self._conn_lock:
                end = os.fstat(fd).st_size
                size = min(limit, max(end, used) + _WAL_AHEAD_BYTES)
                zeros = bytes(min(1024 * 1024, max(0, size - end)))
                while end < size:
                    end += os.pwrite(fd, zeros[: size - end], end)
            os.fdatasync(fd)
        except OSError as exc:
            log.warning("could not write zeros ahead in %s: %s", wal, exc)
        finally:
            os.close(fd)

    def _run_batch(
        self,
        conn: sqlite3.Connection,
        tx: Tx,
        batch: list[_Item],
        *,
        inline: bool = False,
    ) -> None:
        """Run ``batch`` in one transaction (the caller holds ``_conn_lock``).

        The jobs run one after another without savepoints (a savepoint costs two statements
        and journals every page a job changes). If one raises, the transaction rolls back
        and the batch runs again the careful way, each job in a savepoint of its own, so
        that only the failing job's writes are undone: jobs may run twice, which the
        store's contract allows (PostgreSQL reruns them on conflicts too).
        """
        state = tx.state
        assert isinstance(state, SqliteState)
        outcomes: list[Outcome]
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                results = [job(tx) for job, _ in batch]
            except Exception as exc:
                state.drop_later()
                conn.execute("ROLLBACK")
                if len(batch) == 1:  # a lone job would only fail again
                    outcomes = [(batch[0][1], None, exc)]
                else:
                    self.careful_batches += 1
                    outcomes = self._careful(conn, tx, batch)
            else:
                conn.execute("COMMIT")
                outcomes = [(fut, r, None) for (_, fut), r in zip(batch, results, strict=True)]
            state.run_later()
        except Exception as exc:  # the commit itself failed: nothing of the batch is durable
            log.exception("store transaction failed")
            state.drop_later()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            outcomes = [(fut, None, exc) for _, fut in batch]
        self._done(conn, outcomes, inline)

    @staticmethod
    def _careful(conn: sqlite3.Connection, tx: Tx, batch: list[_Item]) -> list[Outcome]:
        """Run ``batch`` again in one transaction, each job in its own savepoint.

        The snapshots a failing job read stay queued: a read like any other, it saw the
        rows as they were then.
        """
        conn.execute("BEGIN IMMEDIATE")
        outcomes = each_in_savepoint(conn.execute, tx, batch)
        conn.execute("COMMIT")
        return outcomes

    def _done(
        self,
        conn: sqlite3.Connection,
        outcomes: list[Outcome],
        inline: bool,
    ) -> None:
        self.batches += 1
        self.jobs += len(outcomes)
        self._finished += len(outcomes)
        if self.batches % _CHECKPOINT_EVERY_BATCHES == 0:
            self._checkpoint_wake.set()
        if self._restart_due:
            self._restart_wal(conn)
        if inline:
            _resolve(outcomes)
        else:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(_resolve, outcomes)


def _resolve(outcomes: list[Outcome]) -> None:
    for fut, result, exc in outcomes:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)


def _repos(conn: sqlite3.Connection, server_id: str) -> Tx:
    return Tx(
        flows=SqliteFlows(conn),
        specs=SqliteSpecs(conn),
        executions=SqliteExecutions(conn, server_id),
        state=SqliteState(conn),
        channels=SqliteChannels(conn),
        timers=SqliteTimers(conn),
        history=SqliteHistory(conn),
        blobs=SqliteBlobs(conn),
        claims=SqliteClaims(conn, server_id),
        servers=SqliteServers(conn, server_id),
        signals=SqliteSignals(),
        rpc_calls=SqliteRpcCalls(conn, server_id),
        rpc_requests=SqliteRpcRequests(conn),
        locks=SqliteLocks(conn, server_id),
        streams=SqliteStreams(conn),
        search=SearchRepo(conn, SQLITE),
    )
