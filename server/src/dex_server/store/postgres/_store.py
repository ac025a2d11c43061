from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors as pg_errors

from dex_server.store._contract import StoreUnavailableError, Tx
from dex_server.store._groups import Item as _Item
from dex_server.store._groups import each_in_savepoint
from dex_server.store._migrations import apply_migrations, statements, verify_schema
from dex_server.store._search import POSTGRES, SearchRepo
from dex_server.store.postgres._cluster_repos import (
    DB_NOW,
    PgClaims,
    PgLocks,
    PgRpcCalls,
    PgServers,
    PgSignals,
    PgStreams,
)
from dex_server.store.postgres._pipeline import Pipeline, SearchLink, Unsupported
from dex_server.store.postgres._repos import (
    PgBlobs,
    PgChannels,
    PgExecutions,
    PgFlows,
    PgHistory,
    PgRpcRequests,
    PgSpecs,
    PgState,
    PgTimers,
)

T = TypeVar("T")
log = logging.getLogger("dex_server.store")

Conn = psycopg.Connection[tuple[Any, ...]]

_MAX_BATCH = 512
_MAX_CONFLICT_RETRIES = 8
# groups run through psycopg after one the bare pipeline could not run
_BARE_PAUSE_BATCHES = 64
# 64-bit key of the advisory lock that serialises migration runners across servers
_MIGRATION_LOCK = 0x6465785F6D6967
_RECONNECT_BACKOFF_S = (0.05, 0.1, 0.25, 0.5, 1.0)
_HEARTBEAT_S = 0.5
_RETRY_OR_LOST = (
    psycopg.OperationalError,
    pg_errors.SerializationFailure,
    pg_errors.DeadlockDetected,
)


def redact(url: str) -> str:
    """``url`` without its password, for logs and banners."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    if parts.port:
        host += f":{parts.port}"
    user = f"{parts.username}:***@" if parts.username else ""
    return urlunsplit(parts._replace(netloc=user + host))


def connect(url: str, *, fsync: bool, application_name: str = "dex-server") -> Conn:
    """Open one autocommit connection (transactions are explicit ``BEGIN``/``COMMIT``)."""
    conn: Conn = psycopg.connect(
        url, autocommit=True, prepare_threshold=1, application_name=application_name
    )
    if not fsync:
        # the server's commits survive its own crash (PostgreSQL flushes the WAL soon
        # after); only a crash of the database machine may lose the last commits
        conn.execute("SET synchronous_commit = off")
    return conn


def repos(conn: Conn, *, writer: bool, server_id: str, pipe: Pipeline | None = None) -> Tx:
    """The contract's repositories bound to ``conn`` (and to ``pipe`` while it is active)."""
    kw: dict[str, Any] = {"writer": writer, "server_id": server_id, "pipe": pipe}
    return Tx(
        flows=PgFlows(conn, **kw),
        specs=PgSpecs(conn, **kw),
        executions=PgExecutions(conn, **kw),
        state=PgState(conn, **kw),
        channels=PgChannels(conn, **kw),
        timers=PgTimers(conn, **kw),
        history=PgHistory(conn, **kw),
        blobs=PgBlobs(conn, **kw),
        claims=PgClaims(conn, **kw),
        servers=PgServers(conn, **kw),
        signals=PgSignals(conn, **kw),
        rpc_calls=PgRpcCalls(conn, **kw),
        rpc_requests=PgRpcRequests(conn, **kw),
        locks=PgLocks(conn, **kw),
        streams=PgStreams(conn, **kw),
        search=SearchRepo(conn if pipe is None else SearchLink(conn, pipe), POSTGRES),
    )


class _PgMigrationDb:
    def __init__(self, conn: Conn) -> None:
        self.c = conn

    def ensure_version_table(self) -> None:
        # two servers starting at once: take the lock before CREATE TABLE IF NOT EXISTS,
        # which is not safe against a concurrent creator on its own
        with self.c.transaction():
            self.c.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            self.c.execute(
                "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY,"
                " name TEXT NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"
            )

    def begin_locked(self) -> None:
        self.c.execute("BEGIN")
        self.c.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))

    def applied(self) -> set[int]:
        return {int(r[0]) for r in self.c.execute("SELECT version FROM schema_version")}

    def execute_script(self, sql: str) -> None:
        for statement in statements(sql):
            self.c.execute(statement.encode())

    def record(self, version: int, name: str, applied_at: float) -> None:
        self.c.execute(
            "INSERT INTO schema_version (version, name, applied_at) VALUES (%s,%s,%s)",
            (version, name, applied_at),
        )

    def commit(self) -> None:
        self.c.execute("COMMIT")

    def rollback(self) -> None:
        if not self.c.closed:
            self.c.execute("ROLLBACK")


def migrate(url: str, *, verify_only: bool = False) -> list[int]:
    """Apply pending migrations to the database at ``url`` (or only verify them)."""
    with psycopg.connect(url, autocommit=True) as conn:
        db = _PgMigrationDb(conn)
        if verify_only:
            verify_schema(db, "postgres")
            return []
        return apply_migrations(db, "postgres")


class PostgresStore:
    """PostgreSQL store: psycopg 3 on dedicated threads, with group commit.

    The job model is the SQLite store's: a job is a synchronous ``Callable[[Tx], T]``
    queued to a writer thread; jobs that arrive while a transaction is in progress run
    together in the next one, each in its own savepoint, and every future resolves after
    the COMMIT. A synchronous driver on a thread keeps every job unchanged (no second
    event loop, no ``await`` inside jobs); prepared statements make each query one round
    trip.

    ``pool_size`` connections in all: one writer, the rest serve read-only ``read`` jobs.
    A lost connection fails the jobs of its transaction with
    :class:`StoreUnavailableError` and is opened again on the next job. Serialisation
    failures and deadlocks (possible when several servers share the database) rerun the
    whole group.
    """

    kind = "postgres"
    shared = True

    def __init__(
        self,
        url: str,
        *,
        fsync: bool = True,
        pool_size: int = 4,
        verify_only: bool = False,
        server_id: str = "local",
    ) -> None:
        self.server_id = server_id
        self.url = url
        self.fsync = fsync
        self.pool_size = max(2, pool_size)
        self.verify_only = verify_only
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._conn: Conn | None = None
        self._tx: Tx | None = None
        self._pipe: Pipeline | None = None
        # batches left to run through psycopg after the bare pipeline could not run one
        self._bare_pause = 0
        self.bare_batches = 0  # groups committed through the bare pipeline
        self.bare_fallbacks = 0  # groups it handed to psycopg (a value or type it lacks)
        self._readers: concurrent.futures.ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._reader_conns: list[Conn] = []
        self._reader_lock = threading.Lock()
        self._listener: threading.Thread | None = None
        self._stopping = threading.Event()
        self.batches = 0
        self.jobs = 0
        self.submitted = 0

    def describe(self) -> str:
        return f"postgres {redact(self.url)}"

    def acquire(self) -> None:
        """Several servers share a PostgreSQL store: nothing to take."""

    def release(self) -> None:
        """Nothing was taken."""

    def open(self) -> None:
        """Connect, apply (or verify) migrations and start the writer thread."""
        migrate(self.url, verify_only=self.verify_only)
        self._conn = connect(self.url, fsync=self.fsync)
        self._pipe = Pipeline(self._conn)
        self._tx = repos(self._conn, writer=True, server_id=self.server_id, pipe=self._pipe)
        # recorded before this server claims anything, so its claims can be taken over
        self._beat(self._conn)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="dex-store-writer", daemon=True)
        self._thread.start()
        self._readers = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.pool_size - 1, thread_name_prefix="dex-store-reader"
        )

    def start_signals(self, on_signal: Callable[[str, str], None]) -> None:
        """LISTEN for other servers' signals and keep this server's heartbeat row fresh.

        One thread with its own connection: it records ``(heartbeat_at, backend_pid)``
        every ``_HEARTBEAT_S`` (other servers judge this server dead when the heartbeat is
        older than their lease, or when its session is gone from ``pg_stat_activity``) and
        hands each notification to ``on_signal`` on the event loop. A lost connection is
        opened again (and LISTENs again); signals sent meanwhile are lost, which the
        servers' polling covers.
        """
        assert self._loop is not None, "store is not open"
        self._stopping.clear()
        self._on_signal = on_signal
        self._listener = threading.Thread(
            target=self._listen, name="dex-store-listener", daemon=True
        )
        self._listener.start()

    def _listen(self) -> None:
        conn: Conn | None = None
        failures = 0
        while not self._stopping.is_set():
            try:
                if conn is None or conn.closed or conn.broken:
                    conn = connect(self.url, fsync=True, application_name="dex-server-listener")
                    conn.execute("LISTEN dex")
                self._beat(conn)
                if failures:
                    log.warning("store: signal connection open again")
                    failures = 0
                for n in conn.notifies(timeout=_HEARTBEAT_S):
                    sender, _, rest = n.payload.partition("|")
                    if sender == self.server_id:
                        continue
                    kind, _, data = rest.partition("|")
                    self._signal(kind, data)
            except psycopg.Error as exc:
                if conn is not None:
                    conn.close()
                conn = None
                delay = _RECONNECT_BACKOFF_S[min(failures, len(_RECONNECT_BACKOFF_S) - 1)]
                if failures == 0:  # once per outage, not once per reconnect attempt
                    log.warning("store: signal connection lost (%s); reconnecting", exc)
                failures += 1
                self._stopping.wait(delay)
        if conn is not None:
            # stopping: let another server take over what this one dispatched right away
            with contextlib.suppress(psycopg.Error):
                conn.execute(
                    "UPDATE servers SET heartbeat_at=0 WHERE server_id=%s", (self.server_id,)
                )
            conn.close()

    def _beat(self, conn: Conn) -> None:
        # the database's clock, never this server's: leases compare heartbeats of servers
        conn.execute(
            "INSERT INTO servers (server_id, started_at, heartbeat_at, backend_pid) VALUES"
            f" (%s,{DB_NOW},{DB_NOW},pg_backend_pid()) ON CONFLICT (server_id) DO UPDATE SET"
            " heartbeat_at=excluded.heartbeat_at, backend_pid=excluded.backend_pid",
            (self.server_id,),
        )

    def _signal(self, kind: str, data: str) -> None:
        assert self._loop is not None
        with contextlib.suppress(RuntimeError):  # the loop closed under a stopping server
            self._loop.call_soon_threadsafe(self._on_signal, kind, data)

    async def close(self) -> None:
        """Finish queued jobs, stop the threads and close the connections."""
        if self._thread is not None:
            self._queue.put(None)
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        # the heartbeat stops last: takeover starts once this server committed its last job
        if self._listener is not None:
            self._stopping.set()
            await asyncio.to_thread(self._listener.join)
            self._listener = None
        if self._readers is not None:
            self._readers.shutdown(wait=True)
            self._readers = None
        with self._reader_lock:
            for c in self._reader_conns:
                c.close()
            self._reader_conns.clear()
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def submit(
        self, job: Callable[[Tx], T], *, inline: bool = False, alone: bool = False
    ) -> asyncio.Future[T]:
        """Queue ``job`` for the writer; the future resolves after its transaction commits.

        ``inline`` is ignored: a commit waits for the network, never on the event loop.
        ``alone`` is ignored too: the savepoints of a batch are the database server's.
        """
        assert self._loop is not None, "store is not open"
        fut: asyncio.Future[T] = self._loop.create_future()
        self.submitted += 1
        self._queue.put((job, fut))
        return fut

    async def run(self, job: Callable[[Tx], T], *, alone: bool = False) -> T:
        """Run ``job`` in a transaction and return its result."""
        return await self.submit(job)

    async def read(self, job: Callable[[Tx], T]) -> T:
        """Run the read-only ``job`` on a reader connection (one snapshot) and return it."""
        assert self._readers is not None and self._loop is not None, "store is not open"
        return await self._loop.run_in_executor(self._readers, self._read_job, job)

    # ------------------------------------------------------------------ readers

    def _read_job(self, job: Callable[[Tx], T]) -> T:
        conn: Conn | None = getattr(self._local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            try:
                conn = connect(self.url, fsync=self.fsync)
            except psycopg.OperationalError as exc:
                raise StoreUnavailableError(f"the database is unreachable: {exc}") from exc
            self._local.conn = conn
            self._local.tx = repos(conn, writer=False, server_id=self.server_id)
            with self._reader_lock:
                self._reader_conns.append(conn)
        try:
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                result: T = job(self._local.tx)
            finally:
                if not conn.broken:
                    conn.execute("ROLLBACK")
            return result
        except psycopg.OperationalError as exc:
            raise StoreUnavailableError(f"the database connection failed: {exc}") from exc

    # ------------------------------------------------------------------ writer

    def _run(self) -> None:
        stopping = False
        while not stopping:
            item = self._queue.get()
            if item is None:
                break
            batch = [item]
            while len(batch) < _MAX_BATCH:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    stopping = True
                    break
                batch.append(nxt)
            self._done(self._run_batch(batch))

    def _writer(self) -> tuple[Conn, Tx]:
        conn, tx = self._conn, self._tx
        if conn is not None and tx is not None and not conn.closed and not conn.broken:
            return conn, tx
        if conn is not None:
            conn.close()
        self._conn = self._tx = self._pipe = None
        last: Exception | None = None
        for delay in _RECONNECT_BACKOFF_S:
            try:
                conn = connect(self.url, fsync=self.fsync)
            except psycopg.OperationalError as exc:
                last = exc
                time.sleep(delay)
                continue
            log.warning("store: connected to the database again")
            self._pipe = Pipeline(conn)
            self._conn = conn
            self._tx = repos(conn, writer=True, server_id=self.server_id, pipe=self._pipe)
            return conn, self._tx
        raise StoreUnavailableError(f"the database is unreachable: {last}")

    def _run_batch(self, batch: list[_Item]) -> list[tuple[asyncio.Future[Any], Any, Any]]:
        for attempt in range(_MAX_CONFLICT_RETRIES + 1):
            try:
                conn, tx = self._writer()
            except StoreUnavailableError as exc:
                return [(fut, None, exc) for _, fut in batch]
            try:
                return self._transaction(conn, tx, batch)
            except (pg_errors.SerializationFailure, pg_errors.DeadlockDetected) as exc:
                # another server held the same rows: run the whole group again
                _rollback(conn)
                if attempt == _MAX_CONFLICT_RETRIES:
                    return [(fut, None, exc) for _, fut in batch]
                time.sleep(0.001 * (attempt + 1))
            except psycopg.OperationalError as exc:
                log.warning("store: database connection lost: %s", exc)
                err = StoreUnavailableError(f"the database connection failed: {exc}")
                return [(fut, None, err) for _, fut in batch]
            except Exception as exc:  # the commit itself failed: nothing of the batch is durable
                log.exception("store transaction failed")
                _rollback(conn)
                return [(fut, None, exc) for _, fut in batch]
        raise AssertionError("unreachable")

    def _transaction(
        self, conn: Conn, tx: Tx, batch: list[_Item]
    ) -> list[tuple[asyncio.Future[Any], Any, Any]]:
        # Fastest: the whole group on libpq's bare pipeline (see _pipeline.py). A value or
        # a column type it does not handle sends this group, and the next
        # _BARE_PAUSE_BATCHES, to psycopg's pipeline below; a failing job, to _careful.
        state = tx.state
        assert isinstance(state, PgState)
        pipe = self._pipe
        if pipe is not None and self._bare_pause == 0:
            results: list[Any] = []
            try:
                pipe.begin()
                for job, _ in batch:
                    results.append(job(tx))
                pipe.commit()
            except _RETRY_OR_LOST:
                state.drop_later()
                pipe.abort()
                raise
            except Unsupported as exc:
                state.drop_later()
                pipe.abort()
                _rollback(conn)
                self.bare_fallbacks += 1
                self._bare_pause = _BARE_PAUSE_BATCHES
                log.debug("store: a group ran through psycopg instead: %s", exc)
            except Exception:
                state.drop_later()
                pipe.abort()
                _rollback(conn)
                return self._careful(conn, tx, batch)
            else:
                self.bare_batches += 1
                state.run_later()
                return [(fut, r, None) for (_, fut), r in zip(batch, results, strict=True)]
        elif self._bare_pause > 0:
            self._bare_pause -= 1
        return self._psycopg_pipeline(conn, tx, batch)

    def _psycopg_pipeline(
        self, conn: Conn, tx: Tx, batch: list[_Item]
    ) -> list[tuple[asyncio.Future[Any], Any, Any]]:
        # Fast path: the whole group in pipeline mode, no savepoints. Writes whose result
        # no job reads are queued and travel with the next read, so a Step result costs a
        # few round trips instead of one per statement. If any job fails (a Python error
        # or a database error, which pipeline mode may report under a later job), the
        # transaction rolls back and the group runs again the careful way. The task
        # snapshots the jobs take last travel with the COMMIT and are read after it.
        state = tx.state
        assert isinstance(state, PgState)
        results: list[Any] = []
        try:
            with conn.pipeline():
                cur = conn.cursor()  # one for both: a cursor costs about what a statement does
                cur.execute("BEGIN")
                for job, _ in batch:
                    results.append(job(tx))
                cur.execute("COMMIT")
        except _RETRY_OR_LOST:
            state.drop_later()
            raise
        except Exception:
            state.drop_later()
            _rollback(conn)
            return self._careful(conn, tx, batch)
        state.run_later()
        return [(fut, result, None) for (_, fut), result in zip(batch, results, strict=True)]

    def _careful(
        self, conn: Conn, tx: Tx, batch: list[_Item]
    ) -> list[tuple[asyncio.Future[Any], Any, Any]]:
        """Run the group statement by statement, each job in its own savepoint."""
        conn.execute("BEGIN")
        if len(batch) == 1:
            # a lone job needs no savepoint: if it raises, the whole transaction rolls back
            job, fut = batch[0]
            try:
                result = job(tx)
            except _RETRY_OR_LOST:
                raise
            except Exception as exc:
                conn.execute("ROLLBACK")
                return [(fut, None, exc)]
            conn.execute("COMMIT")
            return [(fut, result, None)]
        outcomes = each_in_savepoint(conn.execute, tx, batch, _RETRY_OR_LOST)
        conn.execute("COMMIT")
        return outcomes

    def _done(self, outcomes: list[tuple[asyncio.Future[Any], Any, Any]]) -> None:
        self.batches += 1
        self.jobs += len(outcomes)
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(_resolve, outcomes)
        except RuntimeError:  # the loop closed under a stopping server
            pass


def _rollback(conn: Conn) -> None:
    if not conn.closed and not conn.broken:
        try:
            conn.execute("ROLLBACK")
        except psycopg.Error:
            pass


def _resolve(outcomes: list[tuple[asyncio.Future[Any], Any, Any]]) -> None:
    for fut, result, exc in outcomes:
        if fut.done():
            continue
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(result)
