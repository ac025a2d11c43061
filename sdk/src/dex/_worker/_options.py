"""Worker options and the defaults they resolve to."""

from __future__ import annotations

import os
import secrets
import socket
import string
from dataclasses import dataclass, field

_DEFAULT_DRAIN_S = 30.0

DEFAULT_ASYNC_TASK_SLOTS = 100
"""Task slots of an ``AsyncWorker`` by default: handlers waiting on I/O (a model call, a
child Flow) run side by side; sync handlers get one thread each."""


def default_thread_slots() -> int:
    """Task slots (= handler threads) of a sync ``Worker`` by default: ``max(16, 4 × CPUs)``."""
    return max(16, 4 * (os.cpu_count() or 1))


_B32 = string.ascii_lowercase + "234567"


@dataclass(frozen=True, kw_only=True)
class PullWorkerOptions:
    """How a Worker pulls tasks from the server.

    Attributes:
        max_concurrent_tasks: handlers running at once (task slots); 0 → the Worker's
            default: 100 for an ``AsyncWorker``, ``max(16, 4 × CPUs)`` for a sync
            ``Worker``. Sync handlers run on a thread pool of this size.
        idle_streams_per_queue: accepted for compatibility; one WebSocket carries every
            task of this Worker, so it has no effect.
        app_worker_id: this Worker's id (1-63 chars of ``[A-Za-z0-9._-]``); empty →
            hostname (or ``DEX_WORKER_INSTANCE`` / ``POD_NAME``) plus 8 random base32 chars.
        stop_drain_timeout: seconds ``stop()`` lets running tasks finish before cancelling
            them; 0 → 30 s.
        reserved_rpc_tasks: slots only RPCs may use, so Steps cannot starve RPCs; None →
            1 when ``max_concurrent_tasks`` ≥ 2, else 0. Must be smaller than the limit.

    """

    max_concurrent_tasks: int = 0
    idle_streams_per_queue: int = 0
    app_worker_id: str = ""
    stop_drain_timeout: float = 0.0
    reserved_rpc_tasks: int | None = None

    def resolved_max_tasks(self, default: int = DEFAULT_ASYNC_TASK_SLOTS) -> int:
        """Return the effective task-slot limit (``default`` when not set)."""
        if self.max_concurrent_tasks < 0:
            raise ValueError("max_concurrent_tasks must be >= 0")
        return self.max_concurrent_tasks or default

    def resolved_reserved_rpc_tasks(self, default: int = DEFAULT_ASYNC_TASK_SLOTS) -> int:
        """Return the effective number of slots reserved for RPCs.

        ``default`` is the slot limit when ``max_concurrent_tasks`` is not set.

        Raises:
            ValueError: the reserve is negative or not smaller than the limit.

        """
        limit = self.resolved_max_tasks(default)
        if self.reserved_rpc_tasks is None:
            return 1 if limit >= 2 else 0
        if not 0 <= self.reserved_rpc_tasks < limit:
            raise ValueError(
                f"reserved_rpc_tasks must be >= 0 and < max_concurrent_tasks ({limit}), "
                f"got {self.reserved_rpc_tasks}"
            )
        return self.reserved_rpc_tasks

    def resolved_app_worker_id(self) -> str:
        """Return the effective Worker id (a fresh random one per call when not set)."""
        if self.app_worker_id:
            _check_worker_id(self.app_worker_id)
            return self.app_worker_id
        host = (
            os.environ.get("DEX_WORKER_INSTANCE")
            or os.environ.get("POD_NAME")
            or os.environ.get("HOSTNAME")
            or socket.gethostname()
            or "worker"
        )
        host = "".join(c if c.isalnum() or c in "._-" else "-" for c in host)[:54] or "worker"
        return f"{host}-{''.join(secrets.choice(_B32) for _ in range(8))}"

    def resolved_drain_timeout(self) -> float:
        """Return the effective drain timeout in seconds."""
        return self.stop_drain_timeout if self.stop_drain_timeout > 0 else _DEFAULT_DRAIN_S


def _check_worker_id(value: str) -> None:
    ok = 1 <= len(value) <= 63 and all(c.isascii() and (c.isalnum() or c in "._-") for c in value)
    if not ok:
        raise ValueError(f"app_worker_id must be 1-63 chars of [A-Za-z0-9._-], got {value!r}")


@dataclass(frozen=True, kw_only=True)
class WorkerOptions:
    """Where a Worker connects and how it pulls.

    Attributes:
        server_address: ``host:port`` (or ``http(s)://`` URL) of the Dex server; default
            ``"localhost:8801"``.
        pull: task-slot and drain settings (``PullWorkerOptions()`` by default).
        credential: bearer token for a server started with one; None sends none.

    """

    server_address: str = "localhost:8801"
    pull: PullWorkerOptions = field(default_factory=PullWorkerOptions)
    credential: str | None = None
