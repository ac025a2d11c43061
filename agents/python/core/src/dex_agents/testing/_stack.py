"""A private Dex server plus Worker child processes for agent integration tests."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from dex import AsyncClient, ClientOptions, Flow, Registry

from dex_agents.testing._history import StepHistoryEntry, find_dexcli, read_step_history
from dex_agents.testing._process import ChildProcess
from dex_agents.testing._worker import READY_FILE_ENV, SERVER_ADDRESS_ENV

if TYPE_CHECKING:
    from dex_agents import AgentSessionClient, AgentSessionFlow

_STARTUP_TIMEOUT_S = 30.0


class WorkerHandle:
    """One Worker child process started by :meth:`AgentTestStack.start_worker`.

    The child runs in its own process group, so :meth:`kill` takes down the Worker and
    anything it spawned at once.
    """

    def __init__(self, process: ChildProcess, index: int) -> None:
        self._process = process
        self.index = index

    @property
    def pid(self) -> int:
        """The child's process ID (also its process group ID)."""
        return self._process.pid

    @property
    def log_path(self) -> Path:
        """The file holding the child's stdout and stderr."""
        return self._process.log_path

    def kill(self) -> None:
        """SIGKILL the Worker's process group and reap it; returns once it is dead."""
        self._process.kill()

    def terminate(self) -> None:
        """Send SIGTERM: the Worker stops gracefully after its running tasks drain."""
        self._process.signal_group(15)

    async def wait(self, timeout: float = 30.0) -> int | None:
        """Wait for the child to exit; its exit code, or None if still running at timeout."""
        return await self._process.wait(timeout)

    def is_running(self) -> bool:
        """Whether the child has not exited yet."""
        return self._process.is_running()

    def log_tail(self, max_chars: int = 4000) -> str:
        """Return the end of the child's output, for failure messages."""
        return self._process.log_tail(max_chars)

    async def _stop(self) -> None:
        await self._process.stop(timeout=10.0)


_SOCKET = "dex.sock"  # in the stack's socket folder (``unix_socket=True``)


class AgentTestStack:
    """A private ``dexcli dev`` server and Worker child processes, for one test.

    Use it as an async context manager. On entry it starts ``dexcli dev --engine zd`` on a
    fresh store under ``tmp_path`` (``dexcli`` from env ``DEXCLI``, else next to
    ``sys.executable``) with a free port, and opens an ``AsyncClient`` for ``flows``. On
    exit it stops every Worker (SIGTERM, then SIGKILL after 10 s), closes the Client and
    stops the server. The store stays in ``tmp_path`` for post-mortem reading, with the
    server's and each Worker's output (``dex-server.log``, ``worker-<n>.log``). Our
    ``dexcli dev --engine zd`` runs the engine in its own process, so no separate
    ``dex-server-zd`` binary is needed.

    Args:
        tmp_path: a private directory for the store, logs and ready files.
        flows: the Flows the Client uses; the Worker child must build the same ones.
        worker_module: the module run as ``python -m worker_module`` for each Worker
            (its main usually calls :func:`run_agent_worker`).
        worker_cwd: the Workers' working directory (default: the current one); it is
            also put first on their ``PYTHONPATH`` so ``worker_module`` resolves.
        worker_env: extra environment for every Worker child.
        unix_socket: the server also listens on a Unix socket (``dexcli dev --unix-socket``,
            in a short private folder under the system's temporary one) and the Workers
            connect there (``DEX_SERVER_ADDRESS=unix:///PATH``) instead of over TCP, as
            Workers beside their server would; the Client and :attr:`server_address` stay
            on TCP. Default ``False``.

    Concurrency: one stack per test; methods are called from the test's event loop.

    """

    def __init__(
        self,
        tmp_path: str | os.PathLike[str],
        flows: Sequence[Flow[Any]],
        worker_module: str,
        *,
        worker_cwd: str | os.PathLike[str] | None = None,
        worker_env: Mapping[str, str] | None = None,
        unix_socket: bool = False,
    ) -> None:
        self.tmp_path = Path(tmp_path)
        self.unix_socket = unix_socket
        # a Unix socket's path is limited to about 100 bytes; tmp_path may be longer
        self._socket_dir: Path | None = None
        self.flows = list(flows)
        self.worker_module = worker_module
        self.worker_cwd = Path(worker_cwd) if worker_cwd is not None else None
        self.worker_env = dict(worker_env or {})
        self.data_dir = self.tmp_path / "dex-data"
        self._server: ChildProcess | None = None
        self._client: AsyncClient | None = None
        self._address: str | None = None
        self._workers: list[WorkerHandle] = []
        self._worker_numbers = itertools.count(1)
        self._database_url: str | None = None

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> AgentTestStack:
        try:
            await self._start_server()
            registry = Registry(self.flows, allow_async_handlers=True)
            self._client = AsyncClient(
                registry, None, ClientOptions(server_address=self.server_address)
            )
        except BaseException:
            await self.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop Workers, close the Client and stop the server (idempotent)."""
        workers, self._workers = self._workers, []
        await asyncio.gather(*(worker._stop() for worker in workers))
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        if self._server is not None:
            server, self._server = self._server, None
            await server.stop(timeout=10.0)
        if self._socket_dir is not None:
            socket_dir, self._socket_dir = self._socket_dir, None
            shutil.rmtree(socket_dir, ignore_errors=True)
        if self._database_url is not None:
            from dex_server.testing import drop_test_database

            url, self._database_url = self._database_url, None
            await asyncio.to_thread(drop_test_database, url)

    async def restart_server(self) -> None:
        """Stop the server as a deploy does (SIGTERM, graceful) and start it again.

        The new server process listens on the same address and opens the same store, so
        the Client and the Workers (which reconnect on their own) carry on. On SQLite the
        Streams, kept in the server's memory, start empty.

        Raises:
            RuntimeError: the stack is not started, or the new server does not start.

        """
        if self._server is None or self._address is None:
            raise RuntimeError("the AgentTestStack is not started (use 'async with')")
        server, self._server = self._server, None
        await server.stop(timeout=10.0)
        await self._start_server(port=self._address.rpartition(":")[2])

    async def _start_server(self, port: str = "0") -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        address_file = self.tmp_path / "dex-server.address"
        address_file.unlink(missing_ok=True)
        database: list[str] = []
        if self._database_url is not None:  # a restart: the same database
            database = ["--database-url", self._database_url]
        elif os.environ.get("DEX_TEST_DATABASE", "").lower() in ("postgres", "postgresql", "pg"):
            # the suites also run on PostgreSQL: a fresh database per stack, dropped at exit
            from dex_server.testing import create_test_database

            self._database_url = await asyncio.to_thread(create_test_database)
            database = ["--database-url", self._database_url]
        if self.unix_socket and self._socket_dir is None:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="dex-stack-"))
        unix = ["--unix-socket", str(self._socket_dir / _SOCKET)] if self._socket_dir else []
        self._server = ChildProcess(
            [
                str(find_dexcli()),
                "dev",
                "--engine",
                "zd",
                "--port",
                port,
                "--address-file",
                str(address_file),
                "--data-dir",
                str(self.data_dir),
                *database,
                *unix,
            ],
            log_path=self.tmp_path / "dex-server.log",
        )
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while True:
            if address_file.exists():
                address = address_file.read_text().strip()
                if ":" in address:
                    self._address = address
                    return
            if not self._server.is_running():
                raise RuntimeError(
                    f"dexcli dev exited with {self._server.returncode} before listening:\n"
                    f"{self._server.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"dexcli dev did not write {address_file} within {_STARTUP_TIMEOUT_S}s:\n"
                    f"{self._server.log_tail()}"
                )
            await asyncio.sleep(0.02)

    def _worker_address(self) -> str:
        address = self.server_address  # raises when the stack is not started
        return address if self._socket_dir is None else f"unix://{self._socket_dir / _SOCKET}"

    # ------------------------------------------------------------------ public API

    @property
    def server_address(self) -> str:
        """``"host:port"`` of the private server.

        Raises:
            RuntimeError: the stack is not started.

        """
        if self._address is None:
            raise RuntimeError("the AgentTestStack is not started (use 'async with')")
        return self._address

    @property
    def client(self) -> AsyncClient:
        """The stack's ``AsyncClient`` (registry built from ``flows``)."""
        if self._client is None:
            raise RuntimeError("the AgentTestStack is not started (use 'async with')")
        return self._client

    @property
    def server_log_path(self) -> Path:
        """The file holding the server's output."""
        return self.tmp_path / "dex-server.log"

    async def start_worker(
        self, *, env: Mapping[str, str] | None = None, timeout: float = _STARTUP_TIMEOUT_S
    ) -> WorkerHandle:
        """Start one more Worker child and wait until it has registered its Flows.

        The child gets env ``DEX_SERVER_ADDRESS`` (the socket's ``unix://`` address with
        ``unix_socket=True``), the stack's ``worker_env`` and ``env``.

        Args:
            env: extra environment for this Worker only.
            timeout: seconds to wait for registration (default 30).

        Returns:
            A handle to kill or terminate the Worker.

        Raises:
            RuntimeError: the child exited or did not register in time (with its output).

        """
        number = next(self._worker_numbers)
        ready_file = self.tmp_path / f"worker-{number}.ready"
        ready_file.unlink(missing_ok=True)
        child_env = {**os.environ, **self.worker_env, **(env or {})}
        child_env[SERVER_ADDRESS_ENV] = self._worker_address()
        child_env[READY_FILE_ENV] = str(ready_file)
        if self.worker_cwd is not None:
            paths = [str(self.worker_cwd), child_env.get("PYTHONPATH", "")]
            child_env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
        process = ChildProcess(
            [sys.executable, "-m", self.worker_module],
            log_path=self.tmp_path / f"worker-{number}.log",
            cwd=self.worker_cwd,
            env=child_env,
        )
        handle = WorkerHandle(process, number)
        self._workers.append(handle)
        deadline = time.monotonic() + timeout
        while not ready_file.exists():
            if not process.is_running():
                raise RuntimeError(
                    f"Worker {number} exited with {process.returncode} before registering:\n"
                    f"{process.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"Worker {number} did not register within {timeout}s:\n{process.log_tail()}"
                )
            await asyncio.sleep(0.02)
        return handle

    def sessions(self, flow: AgentSessionFlow) -> AgentSessionClient:
        """Return an ``AgentSessionClient`` for one of the stack's agent Flows."""
        from dex_agents import AgentSessionClient

        return AgentSessionClient(self.client, flow)

    async def read_step_history(self, flow_id: str) -> list[StepHistoryEntry]:
        """Return the Flow's Step method events, through ``dexcli flow history``."""
        return await read_step_history(self.server_address, flow_id)
