"""Worker options and the defaults they resolve to."""

from __future__ import annotations

import math
import os
import secrets
import socket
import string
from dataclasses import dataclass
from datetime import timedelta

from dex._credential import CredentialLike, check_credential
from dex._env import DEFAULT_SERVER_ADDRESS, env_credential, env_server_address
from dex._worker_target import WorkerTarget
from dex.errors import feature_not_available

__all__ = [
    "DEFAULT_ASYNC_TASK_SLOTS",
    "PullWorkerOptions",
    "WorkerOptions",
    "WorkerTarget",
    "default_thread_slots",
]

_DEFAULT_DRAIN_S = 30.0

DEFAULT_ASYNC_TASK_SLOTS = 100
"""Task slots of an ``AsyncWorker`` by default: handlers waiting on I/O (a model call, a
child Flow) run side by side; sync handlers get one thread each."""


def default_thread_slots() -> int:
    """Task slots (= handler threads) of a sync ``Worker`` by default: ``max(16, 4 × CPUs)``."""
    return max(16, 4 * (os.cpu_count() or 1))


def _seconds(owner: str, name: str, value: timedelta | float, *, positive: bool) -> float:
    if isinstance(value, timedelta):
        s = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        s = float(value)
    else:
        raise TypeError(f"{owner}.{name} must be a timedelta or seconds, got {value!r}")
    if not math.isfinite(s) or s < 0 or (positive and s == 0):
        bound = "positive" if positive else "non-negative"
        raise ValueError(f"{owner}.{name} must be finite and {bound}, got {value!r}")
    return s


_B32 = string.ascii_lowercase + "234567"


@dataclass(frozen=True)
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
        stop_drain_timeout: how long ``stop()`` lets running tasks finish before
            cancelling them, a ``timedelta`` or seconds; 0 → 30 s.
        stop_on_permanent_stream_rejection: when the server rejects the Worker for good
            (bad credentials, invalid registration), ``start()`` raises
            ``PullRegistrationError`` instead of retrying every 60 s (default False).
        reserved_rpc_tasks: slots only RPCs may use, so Steps cannot starve RPCs; None →
            1 when ``max_concurrent_tasks`` ≥ 2, else 0. Must be smaller than the limit.

    Raises:
        ValueError: a negative count or duration, an invalid ``app_worker_id``, or a
            ``reserved_rpc_tasks`` not smaller than a set ``max_concurrent_tasks``.

    """

    max_concurrent_tasks: int = 0
    idle_streams_per_queue: int = 0
    app_worker_id: str = ""
    stop_drain_timeout: timedelta | float = timedelta(0)
    stop_on_permanent_stream_rejection: bool = False
    reserved_rpc_tasks: int | None = None

    def __post_init__(self) -> None:
        if self.max_concurrent_tasks < 0:
            raise ValueError("max_concurrent_tasks must be >= 0")
        if self.idle_streams_per_queue < 0:
            raise ValueError("idle_streams_per_queue must be >= 0")
        _seconds("PullWorkerOptions", "stop_drain_timeout", self.stop_drain_timeout, positive=False)
        if self.app_worker_id:
            _check_worker_id(self.app_worker_id)
        reserve = self.reserved_rpc_tasks
        if reserve is not None and (
            reserve < 0 or (self.max_concurrent_tasks and reserve >= self.max_concurrent_tasks)
        ):
            raise ValueError(
                "reserved_rpc_tasks must be >= 0 and < max_concurrent_tasks "
                f"({self.max_concurrent_tasks}), got {reserve}"
            )

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
        s = _seconds(
            "PullWorkerOptions", "stop_drain_timeout", self.stop_drain_timeout, positive=False
        )
        return s if s > 0 else _DEFAULT_DRAIN_S


def _check_worker_id(value: str) -> None:
    ok = 1 <= len(value) <= 63 and all(c.isascii() and (c.isalnum() or c in "._-") for c in value)
    if not ok:
        raise ValueError(f"app_worker_id must be 1-63 chars of [A-Za-z0-9._-], got {value!r}")


class _DefaultBindAddress(str):
    """The default ``bind_address``: tells "not set" apart from an explicit ``":8803"``."""

    __slots__ = ()


_DEFAULT_BIND_ADDRESS = _DefaultBindAddress(":8803")
_DEFAULT_INDEX_SYNC = timedelta(minutes=2)


@dataclass(frozen=True)
class WorkerOptions:
    """Where a Worker connects and how it pulls.

    Workers of this engine always pull their tasks over one WebSocket; ``pull=None`` means
    ``PullWorkerOptions()``.

    Attributes:
        bind_address: address a listening Worker would bind (default ``":8803"``); this
            release runs pull Workers only, so a Worker built with another value raises
            ``FeatureNotAvailableError``.
        worker_target: how the server reaches the Worker; None or
            ``WorkerTarget(pull=True)``. A listening target raises
            ``FeatureNotAvailableError`` when the Worker is built.
        server_address: ``host:port`` (or ``http(s)://`` URL) of the Dex server,
            ``unix:///PATH`` for a server on this machine listening on that Unix socket
            (its ``--unix-socket``; cheaper per message than TCP), or ``inproc://<name>``
            for an embedded server in this process (``EmbeddedServer.worker_address``);
            default: env ``DEX_SERVER_ADDRESS`` when set, else ``"localhost:8801"``. A
            ``unix:`` address without a path raises ``ValueError``.
        attribute_index_sync_timeout: how long a Worker may take to sync Attribute indexes
            at start (default 2 min, a ``timedelta`` or seconds). This server keeps no
            separate indexes to sync, so the value is only validated.
        pull: task-slot and drain settings; None → ``PullWorkerOptions()``.
        credential: a ``Credential`` (``FileCredential``, ``ApiKeyCredential``, your
            own), a fixed bearer token string, or None (the default): the token in env
            ``DEX_TOKEN`` when set, else no token.

    Raises:
        ValueError: ``pull`` set together with an explicit ``bind_address`` or a
            ``worker_target``, or a non-positive ``attribute_index_sync_timeout``.
        TypeError: ``credential`` is not a credential.

    """

    bind_address: str = _DEFAULT_BIND_ADDRESS
    worker_target: WorkerTarget | None = None
    server_address: str = DEFAULT_SERVER_ADDRESS
    attribute_index_sync_timeout: timedelta | float = _DEFAULT_INDEX_SYNC
    pull: PullWorkerOptions | None = None
    credential: CredentialLike = None

    def __post_init__(self) -> None:
        if self.pull is not None and (
            not isinstance(self.bind_address, _DefaultBindAddress) or self.worker_target is not None
        ):
            raise ValueError("a pull Worker cannot configure bind_address or worker_target")
        _seconds(
            "WorkerOptions",
            "attribute_index_sync_timeout",
            self.attribute_index_sync_timeout,
            positive=True,
        )
        check_credential(self.credential)
        # The environment fills in only what the caller left unset.
        object.__setattr__(self, "server_address", env_server_address(self.server_address))
        object.__setattr__(self, "credential", env_credential(self.credential))

    @property
    def resolved_pull(self) -> PullWorkerOptions:
        """The pull settings in effect (``PullWorkerOptions()`` when ``pull`` is None)."""
        return self.pull if self.pull is not None else _DEFAULT_PULL

    def check_pull_only(self) -> None:
        """Raise ``FeatureNotAvailableError`` when these options ask for a listening Worker."""
        listening = self.bind_address != _DEFAULT_BIND_ADDRESS or (
            self.worker_target is not None and self.worker_target.is_listening
        )
        if listening:
            feature_not_available("listening Workers (WorkerOptions.bind_address/worker_target)")


_DEFAULT_PULL = PullWorkerOptions()
