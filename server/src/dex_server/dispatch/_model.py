from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Literal

import msgspec
from dex._protocol import ErrorInfo, ServerFrame, Task, TaskResult, encoder

_ids = itertools.count(1)

SCHEDULE_TO_START_TIMEOUT = "SCHEDULE_TO_START_TIMEOUT"
"""``error_type`` of an attempt no Worker took within its schedule-to-start timeout."""


def schedule_to_start_error(flow_type: str, timeout_s: float | None) -> ErrorInfo:
    """The failure of an attempt that waited ``timeout_s`` for a Worker in vain.

    ``None``: the limit is not known here (another server's default set the deadline).
    """
    limit = (
        "its schedule_to_start_timeout"
        if timeout_s is None
        else (f"schedule_to_start_timeout={timeout_s:g}s")
    )
    return ErrorInfo(
        error_type=SCHEDULE_TO_START_TIMEOUT,
        message=f"no Worker started the task of Flow type {flow_type!r} within {limit}",
    )


class Envelope(msgspec.Struct, kw_only=True, eq=False):
    """A task waiting for, or held by, a Worker."""

    kind: Literal["wait_for", "execute", "rpc"]
    flow_type: str
    run_id: str
    execution_id: str | None
    attempt: int
    locks: list[str]
    timeout_s: float
    heartbeat_timeout_s: float | None
    schedule_to_start_s: float | None = None
    """Longest wait in a queue for a Worker (Steps; None: the dispatcher's default)."""
    task: Task | None = None
    version: int = 0
    enqueued_at: float = 0.0
    """``time.monotonic()`` when last queued: every requeue restarts the wait."""
    rejected_by: dict[int, float] = {}
    """Connection id → ``time.monotonic()`` of its last rejection of this task."""
    cancelled: bool = False
    locks_held: bool = False
    result: asyncio.Future[TaskResult] | None = None  # RPCs only
    started_at: float = 0.0
    claim_epoch: int | None = None  # Step methods: the claim epoch it was dispatched under

    @property
    def key(self) -> tuple[str, str] | None:
        return (self.run_id, self.execution_id) if self.execution_id else None


class InFlight(msgspec.Struct, kw_only=True, eq=False):
    env: Envelope
    conn: WorkerConn
    task_id: str
    dispatched_at: float
    deadline: float
    last_frame_at: float
    frames: bool = False
    heartbeat_value: msgspec.Raw | None = None


class WorkerConn:
    """One Worker WebSocket: its Flow types, slots and tasks."""

    def __init__(
        self,
        app_worker_id: str,
        flow_types: set[str],
        max_tasks: int,
        reserved_rpc: int,
        instance_id: str = "",
    ) -> None:
        self.id = next(_ids)
        self.app_worker_id = app_worker_id
        self.instance_id = instance_id
        """The Worker process's ``worker_instance_id`` ("": it cannot resume tasks)."""
        self.flow_types = flow_types
        self.max_tasks = max(1, max_tasks)
        self.step_max = max(0, self.max_tasks - max(0, reserved_rpc))
        self.steps = 0
        self.total = 0
        self.tasks: dict[str, InFlight] = {}
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.deliver: Callable[[bytes], None] = self.outbox.put_nowait
        """Takes each encoded frame for the Worker (the outbox, or the endpoint's sender)."""
        self.flush: Callable[[], None] = _nothing
        """Writes the frames ``deliver`` holds for the end of the loop pass now."""
        self.closed = False
        self.held_until: float | None = None
        """Closed, its tasks held for a reconnect until this ``time.monotonic()``."""
        self.freed_at = 0.0
        """``time.monotonic()`` when a task of this Worker last ended with a result."""

    def can_take(self, kind: str) -> bool:
        if self.closed or self.total >= self.max_tasks:
            return False
        return kind == "rpc" or self.steps < self.step_max

    def send(self, frame: ServerFrame) -> None:
        if not self.closed:
            self.deliver(encoder.encode(frame))


def _nothing() -> None:
    """A sender without held frames: nothing to write early."""
