"""``WorkerProcess``: a real Worker in a child process, killable at any instant."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.support.gates import GATE_DIR_ENV

SDK_DIR = Path(__file__).resolve().parents[2]

# The contract between WorkerProcess and worker_child (environment variables).
ENV_SERVER_ADDRESS = "DEX_SERVER_ADDRESS"
ENV_CREDENTIAL = "DEX_CREDENTIAL"
ENV_MAX_TASKS = "DEX_WORKER_MAX_TASKS"
ENV_APP_WORKER_ID = "DEX_WORKER_APP_ID"
ENV_BLOB_CACHE_DIR = "DEX_WORKER_BLOB_CACHE_DIR"
ENV_DRAIN_TIMEOUT = "DEX_WORKER_DRAIN_TIMEOUT"
ENV_READY_FILE = "DEX_WORKER_READY_FILE"
ENV_STATS_FILE = "DEX_WORKER_STATS_FILE"


class WorkerProcess:
    """A Worker running ``python -m tests.support.worker_child MODULE:FACTORY``.

    The child runs in its own process group, so ``kill()`` takes down the Worker and any
    process it spawned at once. ``FACTORY`` is a zero-argument callable returning a
    ``dex.Registry``; the module must be importable from the ``sdk`` directory (for example
    ``tests.flows_for_e2e:registry``).

    Args:
        factory: ``"module:callable"``.
        server_address: the server's ``host:port`` (or ``http://host:port``).
        max_concurrent_tasks: Worker task slots; None keeps the SDK default.
        app_worker_id: the Worker's id; None lets the SDK generate one.
        blob_cache_dir: directory of a persistent blob cache; None runs without one.
        credential: bearer token for a server started with one.
        gate_dir: directory exported as ``DEX_TEST_GATE_DIR`` for ``FileGate.from_env``.
        drain_timeout: seconds a SIGTERM'd Worker drains running tasks before cancelling.
        env: extra environment variables for the child.

    Use it as a context manager (or call ``kill()``) so no child outlives its test.
    """

    def __init__(
        self,
        factory: str,
        *,
        server_address: str,
        max_concurrent_tasks: int | None = None,
        app_worker_id: str | None = None,
        blob_cache_dir: str | os.PathLike[str] | None = None,
        credential: str | None = None,
        gate_dir: str | os.PathLike[str] | None = None,
        drain_timeout: float | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        if ":" not in factory:
            raise ValueError(f"factory must be 'module:callable', got {factory!r}")
        self.factory = factory
        self.server_address = server_address
        self._private_dir = Path(tempfile.mkdtemp(prefix="dex-worker-"))
        self._ready_file = self._private_dir / "ready"
        self._stats_file = self._private_dir / "stats.json"
        child_env = dict(os.environ)
        child_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(SDK_DIR), child_env.get("PYTHONPATH", "")) if p
        )
        child_env[ENV_SERVER_ADDRESS] = server_address
        child_env[ENV_READY_FILE] = str(self._ready_file)
        child_env[ENV_STATS_FILE] = str(self._stats_file)
        optional = {
            ENV_MAX_TASKS: max_concurrent_tasks,
            ENV_APP_WORKER_ID: app_worker_id,
            ENV_BLOB_CACHE_DIR: blob_cache_dir,
            ENV_CREDENTIAL: credential,
            GATE_DIR_ENV: gate_dir,
            ENV_DRAIN_TIMEOUT: drain_timeout,
        }
        for key, value in optional.items():
            if value is not None:
                child_env[key] = str(value)
        child_env.update(env or {})
        self._env = child_env
        self._proc: subprocess.Popen[bytes] | None = None

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, wait_registered: bool = True, timeout: float = 20.0) -> WorkerProcess:
        """Spawn the child; by default block until its Worker registered with the server.

        Raises:
            RuntimeError: the child exited before registering.
            TimeoutError: it did not register within ``timeout`` seconds.
        """
        if self._proc is not None:
            raise RuntimeError("WorkerProcess already started")
        self._ready_file.unlink(missing_ok=True)
        self._stats_file.unlink(missing_ok=True)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.worker_child", self.factory],
            cwd=SDK_DIR,
            env=self._env,
            start_new_session=True,  # own process group: kill() reaches every descendant
        )
        if wait_registered:
            self.wait_registered(timeout)
        return self

    def wait_registered(self, timeout: float = 20.0) -> None:
        """Block until the child's Worker has registered (see ``start``)."""
        proc = self._require()
        deadline = time.monotonic() + timeout
        while not self._ready_file.exists():
            code = proc.poll()
            if code is not None:
                raise RuntimeError(f"worker child {self.factory} exited with {code} early")
            if time.monotonic() >= deadline:
                raise TimeoutError(f"worker child {self.factory} not registered in {timeout}s")
            time.sleep(0.01)

    @property
    def pid(self) -> int:
        """The child's pid (also its process group id)."""
        return self._require().pid

    @property
    def returncode(self) -> int | None:
        """Exit code once the child exited (negative signal number if killed), else None."""
        return self._require().poll()

    def is_alive(self) -> bool:
        """Whether the child is still running."""
        return self._proc is not None and self._proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the child's whole process group and reap it. Idempotent."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._proc.wait()

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM the child (graceful stop with drain) and wait for it to exit.

        Returns:
            The exit code (0 after a clean graceful stop).

        Raises:
            TimeoutError: still running after ``timeout`` seconds (it is then killed).
        """
        proc = self._require()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the child process only (not its group)."""
        self._require().send_signal(sig)

    def wait(self, timeout: float = 30.0) -> int:
        """Wait for the child to exit; on timeout kill it and raise ``TimeoutError``."""
        proc = self._require()
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(
                f"worker child {self.factory} still running after {timeout}s"
            ) from None

    def stats(self) -> dict[str, Any]:
        """Counters the child wrote when it stopped gracefully (``AsyncWorker.stats``).

        Raises:
            FileNotFoundError: the child has not stopped gracefully (yet).
        """
        data: dict[str, Any] = json.loads(self._stats_file.read_text())
        return data

    def close(self) -> None:
        """Kill the child if it still runs and remove the private files."""
        self.kill()
        shutil.rmtree(self._private_dir, ignore_errors=True)

    def _require(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise RuntimeError("WorkerProcess not started")
        return self._proc

    def __enter__(self) -> WorkerProcess:
        if self._proc is None:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "not started" if self._proc is None else f"pid={self._proc.pid}"
        return f"WorkerProcess({self.factory!r}, {state})"


def open_sockets(pid: int) -> int:
    """How many sockets process ``pid`` holds open (Linux ``/proc``)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            count += os.readlink(fd).startswith("socket:")
        except OSError:  # closed while we looked
            continue
    return count
