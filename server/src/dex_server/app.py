"""Server wiring: configuration, the Starlette application and the process entry points.

Use :class:`ServerConfig` to describe one server, :func:`build_app` to get the ASGI
application (tests and embedding), :func:`serve` to run it on the current event loop and
:func:`run_server` to run it as the blocking body of a process. :func:`prepared_store` and
:func:`uvicorn_server` are the start-up steps :func:`serve` and
``dex_server.embedded.EmbeddedServer`` share; :func:`tune_gc` is the one :func:`serve`
adds for a process of its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import gc
import io
import logging
import math
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn
from starlette.applications import Starlette

__all__ = ["ServerConfig", "UnixSocketError", "build_app", "run_server", "serve", "tune_gc"]

_MIB = 1024 * 1024
# a Unix socket's path, without its terminating NUL: sockaddr_un holds 108 bytes on Linux
# and 104 on macOS and the BSDs
MAX_UNIX_SOCKET_PATH_BYTES = 107 if sys.platform.startswith("linux") else 103


class UnixSocketError(OSError):
    """The server cannot listen on ``ServerConfig.unix_socket`` (the message says why)."""


# a graceful stop normally takes well under a second; past this, say where it waits
STOP_REPORT_AFTER_S = 10.0

# Net container allocations between two young collections of a server process (Python's
# default is 700). Every live run holds tasks, envelopes and futures for a while; at 700 a
# young collection came every few Steps under load and promoted whatever was alive at that
# moment, so the older generations grew and their collections walked all of it again.
GC_YOUNG_THRESHOLD = 50_000


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """Everything one Dex server process needs.

    Attributes:
        database_path: the SQLite file holding every durable record (blobs included).
            Exactly one of ``database_path`` and ``database_url`` is set.
        database_url: a ``postgresql://`` URL: keep everything in that PostgreSQL database
            instead (several servers may share it).
        pool_size: PostgreSQL connections of this server's store: one writer (group
            commit) and ``pool_size - 1`` for read-only jobs (at least 2 in all; default 4).
            Ignored for SQLite.
        server_lease_s: with several servers on one database, how long a server may miss
            its heartbeats before another takes over what it was dispatching (a server
            whose database session vanished is taken over after 3 s).
        verify_schema_only: do not migrate; check that the schema is current and fail at
            startup if it is behind (for a database role without DDL rights).
        host: interface to listen on.
        port: TCP port; ``0`` picks a free port (see ``address_file``).
        address_file: when set, ``"host:port"`` is written there (atomically) once the
            server listens. Tests and ``dexcli dev`` read it to find a picked port.
        unix_socket: when set, the server also listens on this Unix socket, with the same
            routes and auth as on TCP, for Workers and clients on this machine
            (``server_address="unix:///PATH"``): a message costs the kernel about half of
            what it costs over loopback TCP. A socket file left by a server that did not
            stop is replaced; the server removes its own when it stops. Raises
            :class:`UnixSocketError` at start when another process listens there, the
            path is another kind of file, or it is longer than a Unix socket's limit.
        token: bearer token every route but ``/v1/health`` requires; ``None`` disables auth.
        retention_s: how long closed Flows stay readable before the sweep deletes them.
        blob_threshold_bytes: values larger than this are stored once by sha256 and sent to
            Workers as blob references.
        max_request_bytes: largest accepted HTTP request body.
        max_value_bytes: largest single value (input, Attribute, message, output).
        max_flow_state_bytes: largest total of one Flow's Attributes and pending messages.
            The largest frame a Worker may send follows from these limits (see
            :attr:`max_worker_frame_bytes`).
        dispatch_wait_s: the server's default schedule-to-start timeout: how long a ready
            Step attempt whose options set none may wait for a Worker before it fails with
            ``SCHEDULE_TO_START_TIMEOUT`` (and follows its retry policy). ``None`` (the
            default): it waits as long as it takes.
        worker_reconnect_grace_s: how long the tasks of a Worker whose WebSocket closed
            stay held for it (not redelivered, not failed, not offered to another Worker),
            so that the same Worker process can reconnect and resume them (see
            ``Register.resume_task_ids``). After it, a task the server received no frame
            for is redelivered and one it did is failed with ``WORKER_CONNECTION_LOST``.
            Heartbeat and method timeouts keep running meanwhile. ``0`` turns resuming off
            (default 5 s; redelivery after a Worker crash waits this much longer).
        sqlite_cache_mib: SQLite's page cache per store connection, in MiB (default 16).
            It is most of what a large SQLite store adds to the server's memory; the
            operating system's file cache serves the pages beyond it. Ignored on PostgreSQL.
        fsync: ``True`` commits with ``synchronous=FULL`` (survives power loss);
            ``False`` uses ``NORMAL`` (survives process crashes only). Defaults to
            ``True`` unless env ``DEX_SERVER_FSYNC`` is ``0`` (for benchmarks that
            measure the engine without the disk's flush latency).
        retention_sweep_interval_s: period of the retention sweep.
        log_level: uvicorn / ``logging`` level name.
        max_header_bytes: largest HTTP request head (request line and headers, in bytes;
            default 64 KiB). A larger one is answered ``431`` before auth runs, and the
            connection is closed.
        max_header_count: most headers in one HTTP request (default 100; over it: ``431``).
        http_head_timeout_s: how long a client has to send a whole request head, counted
            from the connection's opening or from its first byte after an idle keep-alive
            pause (default 10 s; then ``408`` and close, or just close when it sent nothing).
        http_body_timeout_s: how long a client has to send a whole request body after its
            head (default 60 s; then the connection is closed).
        http_keep_alive_s: how long an idle keep-alive connection stays open between
            requests (default 5 s).
        max_connections: most open client connections (HTTP and Worker WebSockets); one
            more is answered ``503`` and closed at once. ``None`` (the default): the
            process's open-file limit (``ulimit -n``) less 64, kept for the store and logs.
        web: serve Dex Web, the browser UI, at ``/ui`` (and redirect ``/`` there) on the
            same port (default ``True``; ``--no-web`` turns it off). It signs in with
            ``token`` when one is set.
        max_sse_connections: most Server-Sent Events connections open at once (Stream and
            history feeds, API and Dex Web together; default 1000). One more is answered
            ``503 UNAVAILABLE`` naming the limit.
        sse_heartbeat_s: seconds between the comment lines an idle Server-Sent Events
            connection gets, so proxies keep it open (default 15).

    """

    database_path: Path | None = None
    database_url: str | None = None
    pool_size: int = 4
    sqlite_cache_mib: int = 16
    verify_schema_only: bool = False
    server_lease_s: float = 15.0
    host: str = "127.0.0.1"
    port: int = 8801
    address_file: Path | None = None
    unix_socket: Path | None = None
    token: str | None = None
    retention_s: float = 86400.0
    blob_threshold_bytes: int = 2048
    max_request_bytes: int = 16 * _MIB
    max_value_bytes: int = 4 * _MIB
    max_flow_state_bytes: int = 64 * _MIB
    dispatch_wait_s: float | None = None
    worker_reconnect_grace_s: float = 5.0
    fsync: bool = field(default_factory=lambda: os.environ.get("DEX_SERVER_FSYNC", "1") != "0")
    retention_sweep_interval_s: float = 60.0
    log_level: str = "warning"
    max_header_bytes: int = 64 * 1024
    max_header_count: int = 100
    http_head_timeout_s: float = 10.0
    http_body_timeout_s: float = 60.0
    http_keep_alive_s: float = 5.0
    max_connections: int | None = None
    web: bool = True
    max_sse_connections: int = 1000
    sse_heartbeat_s: float = 15.0

    def __post_init__(self) -> None:
        if (self.database_path is None) == (self.database_url is None):
            raise ValueError("ServerConfig needs exactly one of database_path and database_url")
        if self.dispatch_wait_s is not None and not (
            math.isfinite(self.dispatch_wait_s) and self.dispatch_wait_s > 0
        ):
            raise ValueError(
                "dispatch_wait_s must be a finite positive number or None, not "
                f"{self.dispatch_wait_s}"
            )
        if not (
            math.isfinite(self.worker_reconnect_grace_s) and self.worker_reconnect_grace_s >= 0
        ):
            raise ValueError(
                "worker_reconnect_grace_s must be a finite number >= 0, not "
                f"{self.worker_reconnect_grace_s}"
            )
        if self.pool_size < 2:
            raise ValueError(f"pool_size must be at least 2, not {self.pool_size}")
        if self.sqlite_cache_mib < 1:
            raise ValueError(f"sqlite_cache_mib must be at least 1, not {self.sqlite_cache_mib}")
        for name in ("max_header_bytes", "max_header_count"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if self.max_sse_connections < 1:
            raise ValueError(
                f"max_sse_connections must be at least 1, not {self.max_sse_connections}"
            )
        if not (math.isfinite(self.sse_heartbeat_s) and self.sse_heartbeat_s > 0):
            raise ValueError(
                f"sse_heartbeat_s must be a finite positive number, not {self.sse_heartbeat_s}"
            )
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {self.max_connections}")
        for name in ("http_head_timeout_s", "http_body_timeout_s", "http_keep_alive_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite positive number, not {value}")

    @property
    def max_worker_frame_bytes(self) -> int:
        """Largest frame a Worker may send; a task's result is one frame.

        Room for a result that writes Attributes and messages up to the Flow state limit,
        plus its output and one more value, plus 1 MiB for everything else (and never less
        than the HTTP body limit). The server announces it at registration; the SDK turns a
        larger result into a ``LIMIT_EXCEEDED`` error result, and the server answers a
        larger frame it can attribute to a task with that error too.
        """
        legal = self.max_flow_state_bytes + 2 * self.max_value_bytes + _MIB
        return max(self.max_request_bytes, legal)


def build_app(config: ServerConfig) -> Starlette:
    """Build the ASGI application for ``config``.

    The store is opened and the background loops (timers, leases, retention) start in the
    application's lifespan, so the app must run under a server that sends lifespan events
    (uvicorn does).
    """
    from dex_server.api import build_routes
    from dex_server.service import Runtime

    runtime = Runtime(config)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    from starlette.middleware import Middleware

    from dex_server.api import BearerAuth
    from dex_server.api._routes import HTTP_ERROR_HANDLERS

    middleware = [Middleware(BearerAuth, token=config.token)]
    if config.web:
        from dex_server.web import WebMount, WebUI

        # outside the bearer check: Dex Web authenticates browsers with its own cookie
        middleware.insert(0, Middleware(WebMount, web=WebUI(runtime, config.token)))
    app = Starlette(
        routes=build_routes(runtime),
        lifespan=lifespan,
        middleware=middleware,
        exception_handlers=HTTP_ERROR_HANDLERS,
    )
    # a trailing slash is another path (an ID may end with one), never a redirect
    app.router.redirect_slashes = False
    app.state.runtime = runtime
    return app


class _Server(uvicorn.Server):
    """uvicorn server that reports readiness once its sockets listen."""

    def __init__(
        self, config: uvicorn.Config, on_ready: list[asyncio.Event], address_file: Path | None
    ) -> None:
        super().__init__(config)
        self._on_ready = on_ready
        self._address_file = address_file
        self.address = ""
        # closed at the end of shutdown: uvicorn re-raises SIGTERM right after it, so code
        # after ``serve()`` in this process may never run
        self.listeners: Listeners | None = None
        # set by a server that owns its process (``serve``): report a stop that hangs
        self.report_slow_stop_after_s: float | None = None
        self._slow_stop: asyncio.TimerHandle | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.should_exit:
            return
        if sockets:
            host, port = sockets[0].getsockname()[:2]
            self.address = f"{host}:{port}"
        if self._address_file is not None:
            _write_atomically(self._address_file, self.address)
        for event in self._on_ready:
            event.set()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.report_slow_stop_after_s is not None:
            self._slow_stop = _report_slow_stop(self.report_slow_stop_after_s)
        # open Server-Sent Events feeds and long polls end now instead of holding the
        # graceful shutdown (long polls answer a retryable UNAVAILABLE)
        runtime = getattr(getattr(self.config.app, "state", None), "runtime", None)
        if runtime is not None:
            from dex_server.api._sse import slots_of

            slots_of(runtime).close_all()
        await super().shutdown(sockets)
        if self.listeners is not None:
            self.listeners.close()

    def stopped(self) -> None:
        """The stop is over: no report of a slow one."""
        if self._slow_stop is not None:
            self._slow_stop.cancel()
            faulthandler.cancel_dump_traceback_later()


def _report_slow_stop(after_s: float) -> asyncio.TimerHandle:
    """Write every thread's and task's stack to stderr if the stop still runs ``after_s`` later.

    Threads are dumped by ``faulthandler``'s own thread, so a blocked event loop is shown
    too; the tasks (where each one awaits) only while the loop still runs.
    """
    faulthandler.dump_traceback_later(after_s, file=sys.stderr)
    loop = asyncio.get_running_loop()

    def tasks() -> None:
        out = io.StringIO()
        for task in asyncio.all_tasks(loop):
            task.print_stack(file=out)
        sys.stderr.write(f"dex server: still stopping after {after_s:g} s; its tasks:\n")
        sys.stderr.write(out.getvalue())
        sys.stderr.flush()

    return loop.call_later(after_s, tasks)


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


async def serve(config: ServerConfig, *, ready: asyncio.Event | None = None) -> None:
    """Run the server on the running event loop until it is told to stop.

    Args:
        config: the server configuration.
        ready: set once the server listens (and ``config.address_file`` was written).

    Raises:
        DataFolderInUseError: another server uses the SQLite store's data folder.
        StoreUnavailableError: the PostgreSQL database cannot be reached.
        StoreNotWritableError: the SQLite store cannot be opened or written.
        SchemaBehindError: ``verify_schema_only`` and the schema is behind.
        OSError: the address cannot be bound.

    SIGINT and SIGTERM stop the server gracefully: new connections are refused, in-flight
    requests finish (pending long polls end at once with a retryable ``UNAVAILABLE``), the
    store commits what it holds and closes.

    The process is taken to be the server's own: before it listens, this tunes the
    process's cyclic garbage collector (:func:`tune_gc`). Embed a server in another
    program with ``dex_server.embedded.EmbeddedServer``, which leaves it alone.

    """
    logging.basicConfig(level=config.log_level.upper())
    app = build_app(config)
    async with prepared_store(config, app):
        server, listeners = uvicorn_server(config, app, [ready] if ready is not None else [])
        server.report_slow_stop_after_s = STOP_REPORT_AFTER_S
        tune_gc()
        try:
            await server.serve(sockets=listeners.sockets)
        finally:
            listeners.close()
            server.stopped()


def tune_gc() -> None:
    """Set this process's garbage collector up for a long-running server.

    Collects once, then freezes what is alive (modules, classes, the application: a
    server keeps them to the end, so later collections need not walk them again), and
    raises the young generation's threshold to :data:`GC_YOUNG_THRESHOLD`, keeping the
    older generations' thresholds. Reference counting still frees everything that is not
    part of a cycle at once; garbage cycles wait longer to be collected. Measured on the
    server under load (3,000 concurrent Flows), the collector's share of its CPU fell
    from about a fifth to under one percent. Call it once, from the thread that runs the
    server, after start-up.
    """
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


@contextlib.asynccontextmanager
async def prepared_store(config: ServerConfig, app: Starlette) -> AsyncIterator[None]:
    """Hold the store of ``app`` for one server and fail early when it is unusable.

    Raises what :func:`serve` raises for the store (``DataFolderInUseError``, ...).
    """
    from dex_server.store import prepare_database

    # one server per SQLite folder: refuse before listening or touching the database
    store = app.state.runtime.store
    store.acquire()
    try:
        # fail before listening, with a clear error, when the database is unusable
        await asyncio.to_thread(
            prepare_database,
            database_url=config.database_url,
            verify_only=config.verify_schema_only,
            store=store,
        )
        yield
    finally:
        store.release()


def uvicorn_server(
    config: ServerConfig,
    app: Starlette,
    on_ready: list[asyncio.Event],
    server_class: type[_Server] | None = None,
) -> tuple[_Server, Listeners]:
    """The uvicorn server of ``app`` and the sockets it is to listen on.

    Pass ``listeners.sockets`` to ``serve(sockets=)`` and call ``listeners.close()`` after
    it; the second socket, when there is one, is ``config.unix_socket``'s.

    ``on_ready`` are set once it listens; ``server_class`` may be a subclass of the
    readiness-reporting server. Raises ``OSError`` when the address cannot be bound
    (:class:`UnixSocketError` for the Unix socket).
    """
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets of that protocol, and an
    # answer written in two sends would otherwise wait for the client's delayed ACK (~40 ms)
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((config.host, config.port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    if config.unix_socket is None:
        listeners = Listeners([sock])
    else:
        try:
            unix = bind_unix_socket(config.unix_socket)
        except OSError:
            sock.close()
            raise
        listeners = Listeners([sock, unix], config.unix_socket)
    from dex_server._http import HttpLimits, default_max_connections, limited_protocol
    from dex_server._ws import DirectWebSocketProtocol

    limits = HttpLimits(
        max_header_bytes=config.max_header_bytes,
        max_header_count=config.max_header_count,
        head_timeout_s=config.http_head_timeout_s,
        body_timeout_s=config.http_body_timeout_s,
        max_connections=config.max_connections or default_max_connections(),
    )
    uv_config = uvicorn.Config(
        app,
        log_level=config.log_level,
        ws=DirectWebSocketProtocol,
        http=limited_protocol(limits),
        # typed int, but only ever given to loop.call_later: a float works
        timeout_keep_alive=config.http_keep_alive_s,  # type: ignore[arg-type]
        lifespan="on",
        # beyond the announced limit, so a frame slightly over it gets an answer, not a close
        ws_max_size=config.max_worker_frame_bytes + _MIB,
        ws_ping_interval=20.0,
        ws_ping_timeout=60.0,
        timeout_graceful_shutdown=5,
    )
    server = (server_class or _Server)(uv_config, on_ready, config.address_file)
    server.listeners = listeners
    return server, listeners


def bind_unix_socket(path: Path) -> socket.socket:
    """A Unix socket bound at ``path``, replacing one that nobody listens on any more.

    Raises:
        UnixSocketError: the path is too long, is a file of another kind, another process
            listens there, the platform has no Unix sockets, or binding fails (its reason).
    """
    if not hasattr(socket, "AF_UNIX"):
        raise UnixSocketError(f"unix_socket {str(path)!r}: this platform has no Unix sockets")
    size = len(os.fsencode(path))
    if size > MAX_UNIX_SOCKET_PATH_BYTES:
        msg = (
            f"unix_socket {str(path)!r} is {size} bytes long, over the limit"
            f" MAX_UNIX_SOCKET_PATH_BYTES={MAX_UNIX_SOCKET_PATH_BYTES} of a Unix socket's"
            " path; choose a shorter path"
        )
        raise UnixSocketError(msg)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(mode):
            raise UnixSocketError(f"unix_socket {str(path)!r} exists and is not a socket")
        if _someone_listens(path):
            raise UnixSocketError(f"unix_socket {str(path)!r}: another process listens there")
        with contextlib.suppress(FileNotFoundError):  # left by a server that did not stop
            os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(os.fspath(path))
    except OSError as exc:
        sock.close()
        msg = f"unix_socket {str(path)!r}: cannot listen there: {exc.strerror or exc}"
        raise UnixSocketError(msg) from None
    return sock


def _someone_listens(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(os.fspath(path))
    except (ConnectionRefusedError, FileNotFoundError):
        return False
    except OSError:  # no permission, a full backlog: somebody's, not ours to replace
        return True
    else:
        return True
    finally:
        probe.close()


class Listeners:
    """The sockets :func:`uvicorn_server` bound: TCP first, then the Unix socket if any."""

    def __init__(self, sockets: list[socket.socket], unix: Path | None = None) -> None:
        self.sockets = sockets
        self._unix = unix
        # the socket file this server made, told apart from one made after it stopped
        self._unix_inode = os.lstat(unix).st_ino if unix is not None else None

    def close(self) -> None:
        """Close the sockets (uvicorn may have closed them already) and remove the file."""
        for sock in self.sockets:
            sock.close()
        if self._unix is not None:
            with contextlib.suppress(OSError):
                if os.lstat(self._unix).st_ino == self._unix_inode:
                    os.unlink(self._unix)


def run_server(config: ServerConfig) -> None:
    """Run the server in this process until SIGINT or SIGTERM (blocking).

    Uses uvloop when it is installed.
    """
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvicorn[standard] installs it
        asyncio.run(serve(config))
    else:
        uvloop.run(serve(config))
