"""Snapshots of a pull Worker's registration with the server."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PullQueueRegistrationState", "PullRegistrationState"]


@dataclass(frozen=True)
class PullQueueRegistrationState:
    """Registration of one task queue of a pull Worker.

    A Worker serves one queue per Flow type it registers plus its own sticky queue (named
    by its ``app_worker_id``); its one WebSocket registers all of them at once.

    Attributes:
        queue: the queue name.
        has_registered_stream: the server accepted the queue at least once.
        last_permanent_error: the last permanent rejection (a ``PullRegistrationError``),
            or None.

    """

    queue: str
    has_registered_stream: bool
    last_permanent_error: BaseException | None


@dataclass(frozen=True)
class PullRegistrationState:
    """Readiness of a pull Worker: ``is_ready`` once every queue has registered.

    Attributes:
        is_ready: every queue registered at least once.
        queues: one entry per queue (empty before ``start()``).

    """

    is_ready: bool = False
    queues: tuple[PullQueueRegistrationState, ...] = ()
