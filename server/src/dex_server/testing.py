"""Test helpers: a real Dex server in a child process, and a TCP proxy to cut connections.

Example::

    async with running_server(tmp_path) as srv:
        async with httpx.AsyncClient(base_url=srv.url) as http:
            ...
        srv.kill()        # SIGKILL, nothing flushed beyond what was committed
        await srv.restart()  # same database, new port

The server runs ``python -m dex_server`` with ``--port 0`` and an address file, so tests
never collide on ports. Its output goes to ``<dir>/server.log``.

The store is SQLite in ``<dir>`` unless the environment variable ``DEX_TEST_DATABASE`` is
``postgres``: then each server gets a fresh PostgreSQL database ``dex_test_<random>`` on
``DEX_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/postgres``), kept
across :meth:`RunningServer.restart` and dropped when the server is stopped.

:class:`TcpProxy` sits between two processes (a server and PostgreSQL, a Worker and a
server) so a test can cut their connections and restore them, as a network fault would.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "RunningServer",
    "create_test_database",
    "drop_test_database",
    "running_server",
    "fresh_database",
    "selected_database",
]

_DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def selected_database() -> str:
    """``"postgres"`` when ``DEX_TEST_DATABASE=postgres``, else ``"sqlite"``."""
    kind = os.environ.get("DEX_TEST_DATABASE", "sqlite").strip().lower() or "sqlite"
    if kind in ("postgres", "postgresql", "pg"):
        return "postgres"
    if kind != "sqlite":
        raise ValueError(f"DEX_TEST_DATABASE must be sqlite or postgres, not {kind!r}")
    return "sqlite"


def _admin_url() -> str:
    return os.environ.get("DEX_TEST_POSTGRES_URL") or _DEFAULT_POSTGRES_URL


def create_test_database() -> str:
    """Create a fresh, empty PostgreSQL database ``dex_test_<random>``; return its URL."""
    import psycopg

    admin = _admin_url()
    name = f"dex_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return urlunsplit(urlsplit(admin)._replace(path="/" + name))


def drop_test_database(url: str) -> None:
    """Drop a database :func:`create_test_database` made (its connections are ended)."""
    import psycopg

    name = urlsplit(url).path.lstrip("/")
    if not name.startswith("dex_test_"):
        raise ValueError(f"refusing to drop {name!r}: not a test database")
    with psycopg.connect(_admin_url(), autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


@contextlib.contextmanager
def fresh_database() -> Iterator[str | None]:
    """A fresh PostgreSQL database URL for one test when ``DEX_TEST_DATABASE=postgres``.

    Yields ``None`` when the tests run on SQLite. The database is dropped at exit.
    """
    if selected_database() != "postgres":
        yield None
        return
    url = create_test_database()
    try:
        yield url
    finally:
        drop_test_database(url)


_FLAGS = {
    "host": "--host",
    "unix_socket": "--unix-socket",
    "token": "--token",
    "retention_s": "--retention-s",
    "retention_sweep_interval_s": "--retention-sweep-interval-s",
    "blob_threshold_bytes": "--blob-threshold-bytes",
    "max_request_bytes": "--max-request-bytes",
    "max_value_bytes": "--max-value-bytes",
    "max_flow_state_bytes": "--max-flow-state-bytes",
    "dispatch_wait_s": "--dispatch-wait-s",
    "worker_reconnect_grace_s": "--worker-reconnect-grace-s",
    "log_level": "--log-level",
    "pool_size": "--pool-size",
    "server_lease_s": "--server-lease-s",
    "max_header_bytes": "--max-header-bytes",
    "max_header_count": "--max-header-count",
    "http_head_timeout_s": "--http-head-timeout-s",
    "http_body_timeout_s": "--http-body-timeout-s",
    "http_keep_alive_s": "--http-keep-alive-s",
    "max_connections": "--max-connections",
    "max_sse_connections": "--max-sse-connections",
    "sse_heartbeat_s": "--sse-heartbeat-s",
}


class RunningServer:
    """A ``python -m dex_server`` child process bound to one data directory.

    Attributes:
        directory: folder holding the database, the address file and ``server.log``.
        database_path: the SQLite file (kept across :meth:`restart`); unused on PostgreSQL.
        database_url: the PostgreSQL database, or ``None`` on SQLite.
        address: ``"host:port"`` of the running server.
        token: the bearer token the server requires, or ``None``.

    """

    def __init__(self, directory: Path, overrides: dict[str, object]) -> None:
        self.directory = directory
        self.database_path = directory / "dex.sqlite3"
        url = overrides.pop("database_url", None)
        self.database_url: str | None = str(url) if url is not None else None
        # a database this object created is also dropped by it
        self._owns_database = False
        self.token: str | None = overrides.get("token")  # type: ignore[assignment]
        self.address = ""
        self._overrides = overrides
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:40123``."""
        return f"http://{self.address}"

    @property
    def pid(self) -> int:
        """Process id of the running server."""
        assert self._proc is not None
        return self._proc.pid

    def _args(self, address_file: Path) -> list[str]:
        args = [
            sys.executable,
            "-m",
            "dex_server",
            *(
                ["--database-url", self.database_url]
                if self.database_url is not None
                else ["--database-path", str(self.database_path)]
            ),
            "--port",
            str(self._overrides.get("port", 0)),
            "--address-file",
            str(address_file),
        ]
        for key, value in self._overrides.items():
            if key == "fsync":
                if not value:
                    args.append("--no-fsync")
            elif key == "port":
                continue
            elif key in _FLAGS:
                if value is not None:
                    args += [_FLAGS[key], str(value)]
            else:
                raise TypeError(f"unknown server option {key!r}")
        return args

    async def start(self, timeout_s: float = 20.0) -> None:
        """Start the process and wait until it listens."""
        if self.database_url is None and selected_database() == "postgres":
            self.database_url = await asyncio.to_thread(create_test_database)
            self._owns_database = True
        address_file = self.directory / "server.address"
        address_file.unlink(missing_ok=True)
        self._log = open(self.directory / "server.log", "ab")
        self._proc = subprocess.Popen(
            self._args(address_file),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout_s
        while not address_file.exists():
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"server exited with {self._proc.returncode}; see "
                    f"{self.directory / 'server.log'}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise TimeoutError("server did not start in time")
            await asyncio.sleep(0.02)
        self.address = address_file.read_text().strip()

    def kill(self) -> None:
        """SIGKILL the server (no graceful shutdown) and reap it."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()
        self._close_log()

    async def stop(self, timeout_s: float = 10.0) -> int | None:
        """Stop gracefully with SIGTERM (SIGKILL after ``timeout_s``); return the exit code.

        A PostgreSQL database this object created is dropped afterwards.
        """
        proc = self._proc
        if proc is None:
            await self.drop_database()
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self._close_log()
        await self.drop_database()
        return proc.returncode

    async def drop_database(self) -> None:
        """Drop the PostgreSQL database this server object created (after it stopped)."""
        if self._owns_database and self.database_url is not None:
            await asyncio.to_thread(drop_test_database, self.database_url)
            self._owns_database = False

    async def restart(self) -> None:
        """Kill the server if it runs, then start it again on the same database."""
        self.kill()
        await self.start()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


@contextlib.asynccontextmanager
async def running_server(directory: Path, **overrides: object) -> AsyncIterator[RunningServer]:
    """Run a server subprocess for the duration of the ``async with`` block.

    Args:
        directory: a fresh folder (``tmp_path``) for the database and logs.
        **overrides: :class:`~dex_server.app.ServerConfig` fields to change, e.g.
            ``token="t"``, ``retention_s=1.0``, ``fsync=False``, ``dispatch_wait_s=2.0``.

    The server is stopped with SIGTERM at exit (killed if it does not stop).

    """
    directory.mkdir(parents=True, exist_ok=True)
    server = RunningServer(directory, dict(overrides))
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
        await server.drop_database()


class TcpProxy:
    """Forward loopback TCP connections to ``target``; :meth:`cut` and :meth:`restore` them.

    ``TcpProxy(("127.0.0.1", port))`` listens on a free loopback port (:attr:`port`) and
    forwards every connection to the target, each direction on its own thread, so it keeps
    forwarding while the test awaits. :meth:`cut` closes every forwarded connection on both
    sides (each peer sees its socket fail) and refuses new ones (accepted, then closed at
    once) until :meth:`restore`. :meth:`close` when done.
    """

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._cut = False
        self._closed = False
        self.accepted = 0
        self.refused = 0
        self._thread = threading.Thread(target=self._accept, name="tcpproxy", daemon=True)
        self._thread.start()

    def url_for(self, url: str) -> str:
        """``url`` (a ``postgresql://`` URL of the target) routed through this proxy."""
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def cut(self) -> None:
        """Close every forwarded connection and refuse new ones until :meth:`restore`."""
        with self._lock:
            self._cut = True
            pairs, self._pairs = self._pairs, []
        for a, b in pairs:
            _close(a)
            _close(b)

    def restore(self) -> None:
        """Forward new connections again."""
        with self._lock:
            self._cut = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.cut()
        self._listener.close()
        self._thread.join(timeout=5)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                refuse = self._cut or self._closed
            if refuse:
                self.refused += 1
                _close(client)
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._cut or self._closed:
                    _close(client)
                    _close(upstream)
                    continue
                self._pairs.append((client, upstream))
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        _close(src)
        _close(dst)


def _close(s: socket.socket) -> None:
    with contextlib.suppress(OSError):
        s.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        s.close()
