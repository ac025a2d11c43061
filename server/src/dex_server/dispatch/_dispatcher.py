"""Ready queues per Flow type, Worker slots, locks, leases and redelivery (in memory)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Protocol

from dex._protocol import CancelTask, ErrorInfo, Task, TaskFrame

from dex_server.dispatch._model import Envelope, InFlight, WorkerConn, schedule_to_start_error
from dex_server.engine import expired

log = logging.getLogger("dex_server.dispatch")

# backoff of a task build that failed (the store is away)
_BUILD_RETRY_FIRST_S = 0.05
_BUILD_RETRY_MAX_S = 2.0
# how long a Worker's rejection of a task keeps the task from it (unless it frees a slot)
_REJECT_BACKOFF_S = 1.0
# Task IDs: a random prefix per process and a counter, unique across servers and restarts
# without a system call per task (32 hex digits, like the UUIDs they replace)
_TASK_ID_PREFIX = os.urandom(8).hex()
_task_numbers = itertools.count(1)


class DispatchHost(Protocol):
    shared: bool
    """Other servers share the store: a task no local Worker serves goes back to them."""

    def release(self, env: Envelope) -> None: ...
    def versions(self) -> dict[str, int]: ...
    def build_task(self, env: Envelope) -> Awaitable[Task | None]: ...
    def attempt_failed(self, inflight: InFlight | Envelope, error: ErrorInfo) -> None: ...


class Dispatcher:
    """Matches queued tasks to Worker connections.

    Steps wait for their lock keys (held from dispatch until their result commits); RPCs
    fail fast on a held key (see :meth:`try_lock_rpc`). A queued Step waits for a Worker
    as long as it takes, unless it has a schedule-to-start timeout (its own, else
    ``schedule_to_start_s``): then the attempt fails with ``SCHEDULE_TO_START_TIMEOUT``.
    A queued RPC waits up to its own timeout. Every requeue (Worker lost, task rejected)
    restarts the wait. A Worker that rejected a task is offered it again once it ended
    another task, or after ``_REJECT_BACKOFF_S``.

    A Worker connection that closes keeps its tasks for ``reconnect_grace_s`` (see
    :meth:`unregister`): the same Worker process may reconnect and resume them
    (:meth:`resume`). Held tasks keep their slots' locks, timers and heartbeat timeouts;
    no other Worker gets them meanwhile.
    """

    def __init__(
        self,
        host: DispatchHost,
        schedule_to_start_s: float | None = None,
        reconnect_grace_s: float = 0.0,
    ) -> None:
        self.host = host
        self.schedule_to_start_s = schedule_to_start_s
        self.reconnect_grace_s = reconnect_grace_s
        self.held: dict[int, WorkerConn] = {}  # closed connections whose tasks wait for resume
        self.retry_rejected: dict[str, float] = {}  # Flow type → when to offer rejected tasks
        self.queues: dict[str, deque[Envelope]] = {}
        self.conns: dict[int, WorkerConn] = {}
        self.inflight: dict[str, InFlight] = {}
        self.by_exec: dict[tuple[str, str], Envelope] = {}
        self.running: dict[tuple[str, str], str] = {}
        self.locks: dict[str, dict[str, Envelope]] = {}
        self.lock_waiters: dict[str, list[Envelope]] = {}

    # ------------------------------------------------------------------ queueing

    def offer(self, env: Envelope) -> None:
        if env.key is not None:
            old = self.by_exec.get(env.key)
            if old is not None and old is not env:
                old.cancelled = True
            self.by_exec[env.key] = env
        if env.locks and not env.locks_held:
            if not self._try_lock(env):
                self.lock_waiters.setdefault(env.run_id, []).append(env)
                return
            env.task = None  # snapshot after the locks are held
        versions = self.host.versions()
        if env.task is None or (env.kind != "rpc" and versions.get(env.run_id, 0) > env.version):
            self._spawn(self._build_then_queue(env))
            return
        self._queue(env)

    async def _build_then_queue(self, env: Envelope) -> None:
        delay = _BUILD_RETRY_FIRST_S
        while True:
            try:
                task = await self.host.build_task(env)
                break
            except Exception:
                # the store could not be read (an outage): the execution stays this server's,
                # so keep trying until it is built or cancelled rather than strand it
                if delay == _BUILD_RETRY_FIRST_S:
                    log.warning("building a task failed; retrying", exc_info=True)
                if env.cancelled:
                    self._drop(env)
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, _BUILD_RETRY_MAX_S)
        if task is None or env.cancelled:
            self._drop(env)
            return
        env.task = task
        self._queue(env)

    def _queue(self, env: Envelope) -> None:
        env.enqueued_at = time.monotonic()
        q = self.queues.setdefault(env.flow_type, deque())
        if env.kind == "rpc":
            q.appendleft(env)
        else:
            q.append(env)
        self.pump(env.flow_type)

    def pump(self, flow_type: str) -> None:
        q = self.queues.get(flow_type)
        if not q:
            return
        conns = [c for c in self.conns.values() if flow_type in c.flow_types]
        if not conns:
            if self.host.shared:
                self._release_all(flow_type)
            return
        skipped: deque[Envelope] = deque()
        while q:
            env = q.popleft()
            if env.cancelled:
                continue
            conn = self._pick(conns, env)
            if conn is None:
                skipped.append(env)
                if not any(c.can_take("rpc") for c in conns):
                    break
                continue
            self._send(conn, env)
        skipped.extend(q)
        self.queues[flow_type] = skipped

    def _release_all(self, flow_type: str) -> None:
        q = self.queues.get(flow_type)
        kept: deque[Envelope] = deque()
        while q:
            env = q.popleft()
            if env.cancelled:
                continue
            if env.kind == "rpc":
                kept.append(env)
            else:
                self.host.release(env)
        self.queues[flow_type] = kept

    def serves(self, flow_type: str) -> bool:
        """Whether a Worker connected to this server accepts ``flow_type``."""
        return any(flow_type in c.flow_types for c in self.conns.values())

    def served_types(self) -> set[str]:
        return {ft for c in self.conns.values() for ft in c.flow_types}

    def free_step_slots(self, flow_type: str) -> int:
        """Step slots free for ``flow_type`` now, less the tasks already queued for it."""
        free = sum(
            max(0, min(c.step_max - c.steps, c.max_tasks - c.total))
            for c in self.conns.values()
            if flow_type in c.flow_types and not c.closed
        )
        return free - len(self.queues.get(flow_type, ()))

    def _pick(self, conns: list[WorkerConn], env: Envelope) -> WorkerConn | None:
        best: WorkerConn | None = None
        now = time.monotonic()
        for c in conns:
            if not c.can_take(env.kind):
                continue
            rejected = env.rejected_by.get(c.id)
            # a rejection is temporary: it lasts until the Worker ends a task, or a backoff
            if rejected is not None and rejected > c.freed_at:
                retry_at = rejected + _REJECT_BACKOFF_S
                if now < retry_at:
                    known = self.retry_rejected.get(env.flow_type)
                    if known is None or retry_at < known:
                        self.retry_rejected[env.flow_type] = retry_at
                    continue
            if best is None or c.total < best.total:
                best = c
        return best

    def _send(self, conn: WorkerConn, env: Envelope) -> None:
        assert env.task is not None
        now = time.time()
        task_id = f"{_TASK_ID_PREFIX}{next(_task_numbers):016x}"
        env.task.task_id = task_id
        env.task.attempt = env.attempt if env.kind != "rpc" else 1
        if env.kind != "rpc" and env.attempt == 1:
            env.task.first_attempt_at = now  # the retry window opens now (see fail_attempt)
        env.task.deadline = now + env.timeout_s
        env.started_at = now
        inflight = InFlight(
            env=env,
            conn=conn,
            task_id=task_id,
            dispatched_at=now,
            deadline=now + env.timeout_s,
            last_frame_at=now,
        )
        self.inflight[task_id] = inflight
        _take_slot(conn, inflight, 1)
        if env.key is not None:
            self.running[env.key] = task_id
        conn.send(TaskFrame(task=env.task))

    def flush(self) -> None:
        """Write the frames sent in this loop pass now (a client waits for what follows)."""
        for conn in self.conns.values():
            conn.flush()

    def _release_slot(self, inflight: InFlight) -> None:
        self.inflight.pop(inflight.task_id, None)
        conn = inflight.conn
        _take_slot(conn, inflight, -1)
        if not conn.tasks:
            self.held.pop(conn.id, None)  # nothing left to resume
        key = inflight.env.key
        if key is not None and self.running.get(key) == inflight.task_id:
            del self.running[key]
        for ft in conn.flow_types:
            self.pump(ft)

    # ------------------------------------------------------------------ worker frames

    def get(self, conn: WorkerConn, task_id: str) -> InFlight | None:
        inflight = conn.tasks.get(task_id)
        if inflight is not None:
            inflight.last_frame_at = time.time()
            inflight.frames = True
        return inflight

    def complete(self, conn: WorkerConn, task_id: str) -> InFlight | None:
        inflight = conn.tasks.get(task_id)
        if inflight is None:
            return None
        conn.freed_at = time.monotonic()
        self._release_slot(inflight)
        return inflight

    def reject(self, conn: WorkerConn, task_id: str) -> None:
        inflight = conn.tasks.get(task_id)
        if inflight is None:
            return
        env = inflight.env
        env.rejected_by[conn.id] = time.monotonic()
        self._release_slot(inflight)
        if not env.cancelled:
            self._queue(env)

    def finished(self, env: Envelope) -> None:
        """Forget a task whose outcome committed; release its locks and forget it."""
        self._drop(env)

    def _drop(self, env: Envelope) -> None:
        if env.key is not None and self.by_exec.get(env.key) is env:
            del self.by_exec[env.key]
        self.release_locks(env)

    # ------------------------------------------------------------------ locks

    def _try_lock(self, env: Envelope) -> bool:
        held = self.locks.setdefault(env.run_id, {})
        if any(k in held and held[k] is not env for k in env.locks):
            return False
        for k in env.locks:
            held[k] = env
        env.locks_held = True
        return True

    def try_lock_rpc(self, env: Envelope) -> bool:
        """Take every lock of an RPC at once, or none (the caller fails fast)."""
        return self._try_lock(env)

    def release_locks(self, env: Envelope) -> None:
        if not env.locks_held:
            return
        env.locks_held = False
        held = self.locks.get(env.run_id, {})
        for k in env.locks:
            if held.get(k) is env:
                del held[k]
        if not held:
            self.locks.pop(env.run_id, None)
        waiters = self.lock_waiters.pop(env.run_id, [])
        for w in waiters:
            if not w.cancelled:
                self.offer(w)

    # ------------------------------------------------------------------ cancellation

    def cancel(self, run_id: str, execution_id: str, reason: str) -> None:
        env = self.by_exec.pop((run_id, execution_id), None)
        if env is None:
            return
        env.cancelled = True
        task_id = self.running.get((run_id, execution_id))
        if task_id is not None:
            inflight = self.inflight.get(task_id)
            if inflight is not None:
                inflight.conn.send(CancelTask(task_id=task_id, reason=reason))
                self._release_slot(inflight)
        self.release_locks(env)
        waiters = self.lock_waiters.get(run_id)
        if waiters:
            self.lock_waiters[run_id] = [w for w in waiters if not w.cancelled]

    # ------------------------------------------------------------------ connections

    def register(self, conn: WorkerConn) -> None:
        self.conns[conn.id] = conn
        for ft in conn.flow_types:
            self.pump(ft)

    def resume(self, conn: WorkerConn, task_ids: list[str]) -> list[str]:
        """Move the listed tasks of ``conn``'s Worker process to ``conn``; return them.

        A task moves when it is still in flight on an earlier connection of the same
        ``instance_id`` (held after a disconnect, or on a connection whose close the server
        has not seen yet) and ``conn`` serves its Flow type; its attempt, deadline and
        heartbeat timer continue. The earlier connections are done: their tasks the Worker
        did not list (it no longer runs them) are handled as lost at once.
        """
        if not conn.instance_id:
            return []
        resumed: list[str] = []
        for task_id in dict.fromkeys(task_ids):
            inflight = self.inflight.get(task_id)
            if inflight is None:
                continue
            old = inflight.conn
            if old is conn or old.instance_id != conn.instance_id:
                continue
            if inflight.env.flow_type not in conn.flow_types or inflight.env.cancelled:
                continue
            _take_slot(old, inflight, -1)
            inflight.conn = conn
            _take_slot(conn, inflight, 1)
            resumed.append(task_id)
        earlier = [
            c
            for c in (*self.conns.values(), *self.held.values())
            if c.instance_id == conn.instance_id and c is not conn
        ]
        for old in earlier:
            self.unregister(old, hold=False)
        return resumed

    def unregister(self, conn: WorkerConn, *, hold: bool = True) -> None:
        """Handle a Worker connection that went away (again: nothing happens).

        With ``hold``, a grace period and a Worker that can resume, its tasks stay held
        until :meth:`check` sees the period end; otherwise they are handled as lost now
        (``hold=False`` also ends a held connection's grace period).
        """
        if conn.closed and (hold or conn.id not in self.held):
            return
        conn.closed = True
        self.conns.pop(conn.id, None)
        if hold and conn.instance_id and conn.tasks and self.reconnect_grace_s > 0:
            conn.held_until = time.monotonic() + self.reconnect_grace_s
            self.held[conn.id] = conn
            return
        self.held.pop(conn.id, None)
        conn.held_until = None
        self._lost(conn)

    def _lost(self, conn: WorkerConn) -> None:
        """Redeliver the tasks ``conn`` sent nothing for, fail the others."""
        for inflight in list(conn.tasks.values()):
            self._release_slot(inflight)
            env = inflight.env
            if env.cancelled:
                continue
            if env.kind == "rpc":
                if env.result is not None and not env.result.done():
                    env.rejected_by.pop(conn.id, None)
                    self._queue(env) if not inflight.frames else env.result.set_exception(
                        _LostError("the Worker connection was lost during the RPC")
                    )
                continue
            if inflight.frames:
                self.host.attempt_failed(
                    inflight,
                    ErrorInfo(
                        error_type="WORKER_CONNECTION_LOST", message="worker connection lost"
                    ),
                )
            else:
                self._queue(env)

    # ------------------------------------------------------------------ leases

    def check(self) -> None:
        """Fail attempts past their timeouts and queued tasks past their wait for a Worker.

        Also ends the grace period of closed connections no Worker resumed in time.
        """
        mono = time.monotonic()
        for conn in [c for c in self.held.values() if (c.held_until or 0.0) <= mono]:
            self.unregister(conn, hold=False)
        now = time.time()
        for inflight in list(self.inflight.values()):
            kind = expired(
                now=now,
                deadline=inflight.deadline,
                last_frame_at=inflight.last_frame_at,
                heartbeat_timeout_s=inflight.env.heartbeat_timeout_s,
            )
            if kind is None:
                continue
            env = inflight.env
            inflight.conn.send(CancelTask(task_id=inflight.task_id, reason=f"{kind} timeout"))
            self._release_slot(inflight)
            if env.kind == "rpc":
                if env.result is not None and not env.result.done():
                    env.result.set_exception(_TimeoutError("the RPC handler timed out"))
                continue
            self.host.attempt_failed(
                inflight,
                ErrorInfo(
                    error_type="TIMEOUT",
                    message=f"{env.kind} {kind} timeout after {now - inflight.dispatched_at:.3f}s",
                ),
            )
        for flow_type, q in self.queues.items():
            for env in [e for e in q if self._overdue(e, mono)]:
                q.remove(env)
                if env.kind == "rpc":
                    if env.result is not None and not env.result.done():
                        env.result.set_exception(
                            _NoWorkerError(
                                f"no Worker took the RPC of Flow type {flow_type!r} within "
                                f"its timeout of {env.timeout_s:g}s"
                            )
                        )
                else:
                    error = schedule_to_start_error(flow_type, self.schedule_to_start(env))
                    self.host.attempt_failed(env, error)
        for flow_type, at in list(self.retry_rejected.items()):
            if mono >= at:
                del self.retry_rejected[flow_type]
                self.pump(flow_type)

    def schedule_to_start(self, env: Envelope) -> float | None:
        """The longest ``env`` may wait in a queue for a Worker (None: as long as it takes)."""
        if env.schedule_to_start_s is not None:
            return env.schedule_to_start_s
        return self.schedule_to_start_s

    def _overdue(self, env: Envelope, mono: float) -> bool:
        if env.cancelled:
            return False
        limit = env.timeout_s if env.kind == "rpc" else self.schedule_to_start(env)
        return limit is not None and mono - env.enqueued_at >= limit

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        _background.add(task)
        task.add_done_callback(_background.discard)


_background: set[asyncio.Future[None]] = set()


def _take_slot(conn: WorkerConn, inflight: InFlight, delta: int) -> None:
    """Put ``inflight`` on ``conn`` (delta 1) or take it off (-1, if it is there)."""
    if delta > 0:
        conn.tasks[inflight.task_id] = inflight
    elif conn.tasks.pop(inflight.task_id, None) is None:
        return
    conn.total += delta
    if inflight.env.kind != "rpc":
        conn.steps += delta


class _LostError(Exception):
    pass


class _TimeoutError(Exception):
    pass


class _NoWorkerError(Exception):
    pass


RpcLostError = _LostError
RpcTimeoutError = _TimeoutError
RpcNoWorkerError = _NoWorkerError
Callback = Callable[[], None]
