from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec
from dex._protocol import (
    ErrorCode,
    ErrorInfo,
    FlowConfigWire,
    FlowSpec,
    HeartbeatAck,
    InvokeRpcRequest,
    StartFlowRequest,
    StopFlowRequest,
    Task,
    TaskResult,
    TimeTravelRequest,
)

from dex_server.dispatch import (
    Dispatcher,
    Envelope,
    InFlight,
    RpcLostError,
    RpcNoWorkerError,
    RpcTimeoutError,
    StreamHub,
    WorkerConn,
)
from dex_server.engine import InvalidSpecError, check_spec, features
from dex_server.engine.ids import new_uuid7
from dex_server.service import _control, _flows, _forks, _locks, _steps, _subflows
from dex_server.service._changes import Changes
from dex_server.service._cluster import Cluster
from dex_server.service._common import (
    Effects,
    Limits,
    ServiceError,
    SpecIndex,
    Specs,
)
from dex_server.service._loops import Outage, StoreHealth, describe, supervise
from dex_server.service._steps import AttemptRef
from dex_server.service._streams import StoreStreams
from dex_server.service._tasks import build_step_task
from dex_server.store import FlowRecord, StoreUnavailableError, Tx, create_store

if TYPE_CHECKING:
    from dex_server.app import ServerConfig

T = TypeVar("T")
log = logging.getLogger("dex_server")
_TIMER_HORIZON_S = 120.0
# how often a Step or RPC waiting for another server's lock looks again without a signal
_LOCK_POLL_S = 0.25
# how often the health probe asks the store, and how long it waits for the answer
_PROBE_EVERY_S = 1.0
_PROBE_TIMEOUT_S = 5.0
# how long a durable heartbeat waits for an unreachable store before it answers an error
_START_PATIENCE_S = 30.0
# a run's version entry outlives its last change by one to two of these periods
_VERSIONS_PRUNE_S = 10.0


class Runtime:
    """The running server: store, specs, dispatcher, Streams and background loops."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.store = create_store(
            database_path=config.database_path,
            database_url=config.database_url,
            fsync=config.fsync,
            pool_size=config.pool_size,
            sqlite_cache_mib=config.sqlite_cache_mib,
            verify_only=config.verify_schema_only,
            server_id=new_uuid7(),
        )
        self.specs = Specs()
        self.limits = Limits(
            blob_threshold_bytes=config.blob_threshold_bytes,
            max_value_bytes=config.max_value_bytes,
            max_flow_state_bytes=config.max_flow_state_bytes,
            max_request_bytes=config.max_request_bytes,
            retention_s=config.retention_s,
        )
        self.dispatcher = Dispatcher(self, config.dispatch_wait_s, config.worker_reconnect_grace_s)
        # with several servers a Stream's readers and writers may be on different ones
        self.streams: StreamHub | StoreStreams = (
            StoreStreams(self.store) if self.store.shared else StreamHub()
        )
        self.shared = self.store.shared
        self.cluster = Cluster(self)
        # the latest version of each run this server touched lately (see ``versions``)
        self._versions: dict[str, int] = {}
        self._versions_touched: set[str] = set()
        self._closed_waiters: dict[str, list[asyncio.Future[None]]] = {}
        # wakes live readers (SSE history feeds, Dex Web pages) after each commit
        self.changes = Changes()
        self._timers: list[tuple[float, str, str]] = []
        self._timer_wake = asyncio.Event()
        self._refill_at = 0.0
        self._fire_outage = Outage("firing a Timer")
        self._jobs_outage = Outage("a background store job")
        self._result_outage = Outage("committing Step results")
        self._background: set[asyncio.Future[Any]] = set()
        self.health = StoreHealth()
        self._loops: list[asyncio.Task[None]] = []
        # run_id -> (gate, callers using it): a transactional RPC passes its run's gate; the
        # entry goes with the last caller, so the dict holds only runs with RPCs in progress
        self._rpc_gates: dict[str, tuple[asyncio.Lock, int]] = {}
        self._commit_holds: dict[str, asyncio.Event] = {}
        self._unlocked = asyncio.Event()

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.store.open()
        await self.refresh_specs()
        await self.cluster.start()
        self._loops = [
            self.start_loop("leases", self._lease_loop),
            self.start_loop("timers", self._timer_loop),
            self.start_loop("retention", self._retention_loop),
            self.start_loop("store probe", self._probe_loop),
        ]

    def start_loop(self, name: str, body: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
        """Run the loop ``body`` under :func:`supervise` (restarted if it ever ends)."""
        return asyncio.create_task(supervise(name, body), name=f"dex-{name}")

    async def stop(self) -> None:
        await self.cluster.stop()
        for t in self._loops:
            t.cancel()
        for t in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await self.store.close()

    async def run(self, job: Callable[[Tx], T]) -> T:
        return await self.store.run(job)

    async def refresh_specs(self) -> None:
        """Load every spec version and each type's latest (other servers store them too)."""
        rows = await self.store.run(lambda tx: tx.specs.all())
        latest: dict[str, tuple[float, SpecIndex]] = {}
        for version, spec, updated_at in rows:
            idx = self.specs.known(spec.flow_type, version) or SpecIndex(spec, version)
            self.specs.install(idx, current=False)
            best = latest.get(spec.flow_type)
            if best is None or updated_at > best[0]:
                latest[spec.flow_type] = (updated_at, idx)
        for _, idx in latest.values():
            self.specs.install(idx)

    def release(self, env: Envelope) -> None:
        """No Worker of this server serves ``env``'s Flow type: leave it to the others."""
        self.cluster.release(env)

    def flow_closed_elsewhere(self, flow_id: str) -> None:
        for w in self._closed_waiters.pop(flow_id, []):
            if not w.done():
                w.set_result(None)

    # ------------------------------------------------------------------ effects

    def versions(self) -> dict[str, int]:
        """Each run's latest committed version, for the dispatcher to spot stale snapshots.

        A snapshot built by a job can reach the dispatcher after a later job of the same run
        committed; the entry tells it to rebuild. Entries go when the run closes here and,
        for runs that closed elsewhere or went quiet, once a run had no queued task and no
        change for a whole ``_VERSIONS_PRUNE_S`` period.
        """
        return self._versions

    def prune_versions(self) -> None:
        live = {run_id for run_id, _ in self.dispatcher.by_exec}
        keep = self._versions_touched | live
        for run_id in [r for r in self._versions if r not in keep]:
            del self._versions[run_id]
        self._versions_touched = set()

    def apply(self, eff: Effects) -> None:
        if eff.versions or eff.closed:
            self.changes.bump([*eff.versions, *(run_id for _, run_id in eff.closed)])
        for idx in eff.specs:
            self.specs.install(idx)
        for run_id, v in eff.versions.items():
            if v > self._versions.get(run_id, 0):
                self._versions[run_id] = v
                self._versions_touched.add(run_id)
        for run_id, eid in eff.cancelled:
            self.dispatcher.cancel(run_id, eid, "the Step was cancelled")
        for flow_id, run_id in eff.closed:
            self._versions.pop(run_id, None)
            for w in self._closed_waiters.pop(flow_id, []):
                if not w.done():
                    w.set_result(None)
        for r in eff.ready:
            self.dispatcher.offer(
                Envelope(
                    kind=r.kind,
                    flow_type=r.flow_type,
                    run_id=r.run_id,
                    execution_id=r.execution_id,
                    attempt=r.attempt,
                    locks=r.locks,
                    timeout_s=r.timeout_s,
                    heartbeat_timeout_s=r.heartbeat_timeout_s,
                    schedule_to_start_s=r.schedule_to_start_s,
                    task=r.task,
                    version=r.version,
                    claim_epoch=r.record.claim_epoch if r.record is not None else None,
                )
            )
        if eff.streams:
            self._append_held_streams(eff)
        self._apply_forks(eff)
        if eff.timers:
            horizon = time.time() + _TIMER_HORIZON_S
            for t in eff.timers:
                if t[0] <= horizon:
                    heapq.heappush(self._timers, t)
            self._timer_wake.set()

    def _append_held_streams(self, eff: Effects) -> None:
        # The tasks the commit made ready leave first; the result's held Stream writes are
        # appended before this callback returns, so they still precede anything those
        # tasks send back.
        if eff.ready:
            self.dispatcher.flush()
        for flow_type, stream, flow_id, value, source in eff.streams:
            self.step_stream_write(flow_type, stream, flow_id, value, source)

    async def build_task(self, env: Envelope) -> Task | None:
        assert env.execution_id is not None
        run_id, eid, attempt, keys = env.run_id, env.execution_id, env.attempt, env.locks
        # other servers may hold the keys: take them in the store too, with the snapshot
        holder = _locks.attempt_holder(eid, env.kind, attempt) if keys and self.shared else None

        me, epoch = self.store.server_id, env.claim_epoch

        def job(tx: Tx) -> tuple[Task | None, int, bool]:
            flow, e = tx.flows.get_with_execution(run_id, eid)
            if flow is None or flow.status != "running" or e is None or e.attempt != attempt:
                return None, 0, True
            if epoch is not None and (e.claimed_by, e.claim_epoch) != (me, epoch):
                return None, 0, True  # another server dispatches it now
            if holder is not None and not _locks.take(tx, run_id, keys, holder):
                return None, 0, False
            return build_step_task(tx, flow, e), flow.version, True

        while True:
            task, version, taken = await self.store.run(job)
            if taken or env.cancelled:
                break
            await self.await_unlock()
        env.version = version
        return task

    async def await_unlock(self) -> None:
        """Wait until a lock key may have been freed (a signal, or a short poll interval)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_LOCK_POLL_S):
                await self._unlocked.wait()

    def wake_unlock(self) -> None:
        self._unlocked.set()
        self._unlocked = asyncio.Event()

    def _ref(self, env: Envelope, started_at: float) -> AttemptRef:
        assert env.execution_id is not None and env.kind != "rpc"
        return AttemptRef(
            run_id=env.run_id,
            execution_id=env.execution_id,
            kind=env.kind,
            attempt=env.attempt,
            started_at=started_at,
            locked=bool(env.locks) and self.shared,
            claim=(self.store.server_id, env.claim_epoch) if env.claim_epoch is not None else None,
        )

    def attempt_failed(self, inflight: InFlight | Envelope, error: ErrorInfo) -> None:
        if isinstance(inflight, InFlight):
            env, hb, started = inflight.env, inflight.heartbeat_value, inflight.dispatched_at
        else:
            env, hb, started = inflight, None, time.time()
        if env.execution_id is None or env.kind == "rpc":
            return
        self._spawn(self._commit_failure(env, self._ref(env, started), error, hb))

    async def _commit_failure(
        self, env: Envelope, ref: AttemptRef, error: ErrorInfo, hb: msgspec.Raw | None
    ) -> None:
        try:
            eff = await self.after_holds(
                env.run_id,
                lambda tx: _steps.fail_step_attempt(
                    tx, self.limits, self.specs, ref, error, time.time(), hb
                ),
            )
        except _steps.FencedError as exc:
            _log_fenced(exc)
            return
        finally:
            self.dispatcher.finished(env)
        self.apply(eff)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Future[Any]) -> None:
        self._background.discard(task)
        exc = None if task.cancelled() else task.exception()
        if exc is None:
            self._jobs_outage.ok()
            return
        if isinstance(exc, StoreUnavailableError):
            # an outage fails many jobs at once: one line for all of them
            self.health.note(exc)
            self._jobs_outage.failed(exc)
            return
        log.error("background job failed", exc_info=exc)

    # ------------------------------------------------------------------ worker frames

    def worker_registered(self, conn: WorkerConn, flows: list[FlowSpec]) -> None:
        """Serve ``conn``: its specs were stored (``register_specs``); no running run changes."""
        self.dispatcher.register(conn)
        if self.shared:
            for flow_type in conn.flow_types:
                self._spawn(self.cluster.claim_pool(flow_type))
                self._spawn(self.cluster.claim_rpcs(flow_type))

    async def register_specs(self, flows: list[FlowSpec]) -> None:
        """Store a Worker's spec versions and make them their types' current ones.

        Runs keep the version they started with, so a Worker of another code version
        changes only what new starts without a spec of their own run with.

        Raises:
            ServiceError: BAD_REQUEST for a spec an HTTP start would refuse too (nothing
                is stored then).

        """
        for spec in flows:
            try:
                check_spec(spec)
            except InvalidSpecError as exc:
                raise ServiceError(ErrorCode.BAD_REQUEST, str(exc)) from None
        now = time.time()
        indexes = [self.specs.index(spec) for spec in flows]

        def job(tx: Tx) -> None:
            for idx in indexes:
                tx.specs.put(idx.version, idx.spec, now)

        await self.store.run(job)
        for idx in indexes:
            self.specs.install(idx)
        if self.shared:
            await self.store.run(lambda tx: tx.signals.notify("spec", ""))

    def on_result(self, conn: WorkerConn, result: TaskResult) -> None:
        inflight = self.dispatcher.complete(conn, result.task_id)
        if inflight is None:
            return
        env = inflight.env
        if env.kind == "rpc":
            if env.result is not None and not env.result.done():
                env.result.set_result(result)
            return
        ref = self._ref(env, inflight.dispatched_at)
        if result.error is not None and inflight.heartbeat_value is not None:
            hb = inflight.heartbeat_value
            self._spawn(self._commit_failure(env, ref, result.error, hb))
            return
        if env.run_id in self._commit_holds:
            self._spawn(self._commit_result(env, ref, result))
            return
        # hot path: queue the job straight to the writer, no task per result
        self._submit_result(env, ref, result)

    def _submit_result(self, env: Envelope, ref: AttemptRef, result: TaskResult) -> None:
        def job(tx: Tx) -> Effects:
            return _subflows.apply_step_result(
                tx, self.limits, self.specs, ref, result, time.time()
            )

        def done(fut: asyncio.Future[Effects]) -> None:
            exc = None if fut.cancelled() else fut.exception()
            if isinstance(exc, _locks.CommitHeldError):
                # a transactional RPC on another server holds the run: commit after it
                self._spawn(self._commit_result(env, ref, result))
                return
            self.dispatcher.finished(env)
            if fut.cancelled():
                return
            if isinstance(exc, _steps.FencedError):
                _log_fenced(exc)
                return
            if isinstance(exc, StoreUnavailableError):
                # the orphan sweep delivers the attempt again once the store is back
                self.health.note(exc)
                self._result_outage.failed(exc)
                return
            if exc is not None:
                log.error("committing a Step result failed", exc_info=exc)
                return
            self._result_outage.ok()
            self.apply(fut.result())

        # an idle SQLite store commits it right here, without the writer thread hand-offs
        self.store.submit(job, inline=True).add_done_callback(done)

    async def _commit_result(self, env: Envelope, ref: AttemptRef, result: TaskResult) -> None:
        try:
            eff = await self.after_holds(
                env.run_id,
                lambda tx: _subflows.apply_step_result(
                    tx, self.limits, self.specs, ref, result, time.time()
                ),
            )
        except _steps.FencedError as exc:
            _log_fenced(exc)
            return
        finally:
            self.dispatcher.finished(env)
        self.apply(eff)

    async def after_holds(self, run_id: str, job: Callable[[Tx], T], *, inline: bool = False) -> T:
        """Run a write of ``run_id`` once no transactional RPC holds the run, on any server.

        A transactional RPC's snapshot, Worker call and commit are atomic: every other write
        of its run (Step results and failures, Timer firings, plain RPC effects) commits
        after it. ``job`` raises ``CommitHeldError`` while another server's RPC holds the
        run; a local hold is awaited before the job is queued (the store runs jobs in
        order, so a job queued before the RPC's snapshot commits before it).
        """
        while True:
            hold = self._commit_holds.get(run_id)
            while hold is not None:
                await hold.wait()
                hold = self._commit_holds.get(run_id)
            try:
                return await self.store.submit(job, inline=inline)
            except _locks.CommitHeldError:
                await self.await_unlock()

    async def durable_heartbeat(
        self, conn: WorkerConn, task_id: str, seq: int, value: msgspec.Raw | None
    ) -> None:
        """Record that the task's attempt started, then answer the Worker, which waits.

        The answer is a ``HeartbeatAck``, with ``error_code`` set when the start was not
        recorded: ``FLOW_NOT_ACTIVE`` (the task is not running here, or its attempt is no
        longer current), ``UNAVAILABLE`` (the store stayed unreachable for
        ``_START_PATIENCE_S``) or ``INTERNAL`` (the store refused the write).
        """

        def refuse(code: str, message: str) -> None:
            conn.send(HeartbeatAck(task_id=task_id, seq=seq, error_code=code, error=message))

        inflight = conn.tasks.get(task_id)
        if inflight is None:
            refuse(ErrorCode.FLOW_NOT_ACTIVE, f"task {task_id!r} is not running on this Worker")
            return
        if inflight.env.execution_id is None:  # an RPC: nothing to record
            conn.send(HeartbeatAck(task_id=task_id, seq=seq))
            return
        ref = self._ref(inflight.env, inflight.dispatched_at)
        delay, give_up = 0.05, time.monotonic() + _START_PATIENCE_S
        while True:
            try:
                ok = await self.store.run(lambda tx: _steps.mark_started(tx, ref, value))
                break
            except _steps.FencedError as exc:
                # another server runs this execution now: the Worker must not go on
                _log_fenced(exc)
                self.fenced(inflight.env)
                return
            except StoreUnavailableError as exc:
                # the Worker waits for this acknowledgement: keep trying while the attempt
                # is ours (recording the start twice is harmless)
                self.health.note(exc)
                if conn.closed or conn.tasks.get(task_id) is not inflight:
                    refuse(ErrorCode.FLOW_NOT_ACTIVE, "the task ended while the store was away")
                    return
                if time.monotonic() > give_up:
                    refuse(ErrorCode.UNAVAILABLE, f"the start was not recorded: {describe(exc)}")
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
            except Exception as exc:
                log.warning("recording a durable start failed: %s", describe(exc), exc_info=exc)
                refuse(ErrorCode.INTERNAL, f"the start was not recorded: {describe(exc)}")
                return
        if ok:
            conn.send(HeartbeatAck(task_id=task_id, seq=seq))
        else:
            refuse(
                ErrorCode.FLOW_NOT_ACTIVE,
                "the attempt is no longer current (its Flow closed, or it timed out or was"
                " cancelled)",
            )

    def fenced(self, env: Envelope) -> None:
        """Drop an attempt another server took over and cancel it on its Worker."""
        if env.key is not None and self.dispatcher.by_exec.get(env.key) is env:
            self.dispatcher.cancel(env.run_id, env.key[1], "another server took this Step over")

    def stream_capacity(self, flow_type: str, stream: str) -> int:
        if self.specs.get(flow_type) is None:
            raise ServiceError(ErrorCode.UNKNOWN_FLOW_TYPE, f"unknown Flow type {flow_type!r}")
        cap = self.specs.stream_capacity(flow_type, stream)
        if cap is None:
            raise ServiceError(
                ErrorCode.BAD_REQUEST, f"Flow type {flow_type!r} declares no Stream {stream!r}"
            )
        return cap

    def stream_write(
        self, flow_type: str, stream: str, flow_id: str, value: bytes, source: str
    ) -> asyncio.Future[None] | None:
        """Append a Stream message; with a shared store, a future of its commit."""
        cap = self.stream_capacity(flow_type, stream)
        self.limits.check_value(value, "Stream message")
        if len(value) > cap:
            from dex_server.service._common import LimitError

            raise LimitError("stream_capacity_bytes", len(value), cap, "Stream message")
        return self.streams.write((flow_type, stream, flow_id), cap, value, source)

    def step_stream_write(
        self, flow_type: str, stream: str, flow_id: str, value: bytes, source: str
    ) -> None:
        """A Step's Stream write: best effort, so a refused one is logged and dropped."""
        try:
            self.stream_write(flow_type, stream, flow_id, value, source)
        except ServiceError as exc:
            log.info("stream write dropped: %s", exc.message)

    # ------------------------------------------------------------------ client API

    def require(self, requested: list[str]) -> None:
        """Refuse a request that needs an optional feature this server does not run.

        Raises:
            ServiceError: ``FEATURE_NOT_AVAILABLE``, naming the first missing feature in
                ``detail``.

        """
        absent = features.missing(requested)
        if absent:
            raise ServiceError(
                ErrorCode.FEATURE_NOT_AVAILABLE,
                f"this server does not run {', '.join(absent)}",
                detail=absent[0],
            )

    async def start_flow(self, req: StartFlowRequest) -> str:
        self.require(req.requires)
        run_id, eff = await self.store.run(
            lambda tx: _flows.start_flow(tx, self.limits, self.specs, req, time.time())
        )
        self.apply(eff)
        return run_id

    def _apply_forks(self, eff: Effects) -> None:
        """Jobs that follow a commit: recorded outcomes to take, runs to continue as new."""
        for run_id, eid in eff.recorded:
            self._spawn(self._then_apply(_forks.apply_recorded, run_id, eid))
        for run_id in dict.fromkeys(eff.continue_as_new):
            self._spawn(self._then_apply(_forks.continue_as_new, run_id))

    async def _then_apply(self, job: Callable[..., Effects], *args: str) -> None:
        limits, specs = self.limits, self.specs
        self.apply(await self.store.run(lambda tx: job(tx, limits, specs, *args, time.time())))

    async def time_travel(self, flow_id: str, req: TimeTravelRequest) -> str:
        """Fork the Flow's latest run into a new one; the new run ID."""
        run_id, eff = await self.store.run(
            lambda tx: _forks.time_travel(tx, self.limits, self.specs, flow_id, req, time.time())
        )
        self.apply(eff)
        return run_id

    async def trigger_continue_as_new(self, flow_id: str) -> None:
        self.apply(await self.store.run(lambda tx: _forks.trigger_continue_as_new(tx, flow_id)))

    async def stop_flow(self, flow_id: str, req: StopFlowRequest) -> None:
        eff = await self.store.run(
            lambda tx: _flows.stop_flow(tx, self.limits, flow_id, req, time.time())
        )
        self.apply(eff)

    async def wait_closed(self, flow_id: str, timeout_s: float) -> bool:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._closed_waiters.setdefault(flow_id, []).append(fut)
        try:
            return await self._wait_closed(flow_id, fut, timeout_s)
        finally:
            # every way out forgets the waiter: the dict holds only Flows being waited on
            waiters = self._closed_waiters.get(flow_id)
            if waiters is not None:
                if fut in waiters:
                    waiters.remove(fut)
                if not waiters:
                    del self._closed_waiters[flow_id]

    async def _wait_closed(self, flow_id: str, fut: asyncio.Future[None], timeout_s: float) -> bool:
        info = await self.store.run(lambda tx: _flows.describe(tx, flow_id))
        if info.status != "running":
            return True
        try:
            if not self.shared:
                async with asyncio.timeout(timeout_s):
                    await fut
                return True
            # the close may commit on another server: its signal wakes us, polling backs it up
            deadline = time.monotonic() + timeout_s
            while not fut.done():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, 1.0)):
                        await asyncio.shield(fut)
                if not fut.done():
                    info = await self.store.run(lambda tx: _flows.describe(tx, flow_id))
                    if info.status != "running":
                        return True
        except TimeoutError:
            return False
        return True

    async def wait_step_done(
        self, flow_id: str, step_type: str, number: int, timeout_s: float
    ) -> bool:
        """Wait up to ``timeout_s`` for one Step execution of the latest run to end.

        Returns whether it ended. A commit of this server on the run wakes the check;
        with several servers the store is also polled every second.
        """
        deadline = time.monotonic() + timeout_s

        def check(tx: Tx) -> tuple[str, bool]:
            return _control.step_done(tx, flow_id, step_type, number)

        run_id, done = await self.store.run(check)
        while not done:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with self.changes.watching(run_id):
                # marked first, checked after: a commit in between still wakes us
                seen = self.changes.mark(run_id)
                run_id, done = await self.store.run(check)
                if not done:
                    wait_s = min(left, 1.0) if self.shared else left
                    await self.changes.wait_run(run_id, seen, wait_s)
                    run_id, done = await self.store.run(check)
        return True

    async def update_flow_config(self, flow_id: str, update: FlowConfigWire) -> None:
        """Merge ``update`` into a running Flow's FlowConfig (see ``_flows.update_config``)."""
        eff = await self.store.run(
            lambda tx: _flows.update_config(tx, flow_id, update, time.time())
        )
        self.apply(eff)

    async def skip_timer(
        self,
        flow_id: str,
        step_type: str,
        number: int,
        condition_id: str | None,
        condition_index: int | None,
    ) -> None:
        """Fire one pending timer of a waiting Step execution now (see ``_control``)."""
        run_id = (await self.store.run(lambda tx: _flows.describe(tx, flow_id))).run_id
        eff = await self.after_holds(
            run_id,
            lambda tx: _control.skip_step_timer(
                tx,
                self.limits,
                flow_id,
                step_type,
                number,
                condition_id,
                condition_index,
                time.time(),
            ),
        )
        self.apply(eff)

    def _enter_gate(self, run_id: str) -> asyncio.Lock:
        gate, users = self._rpc_gates.get(run_id) or (asyncio.Lock(), 0)
        self._rpc_gates[run_id] = (gate, users + 1)
        return gate

    def _leave_gate(self, run_id: str) -> None:
        gate, users = self._rpc_gates[run_id]
        if users > 1:
            self._rpc_gates[run_id] = (gate, users - 1)
        else:
            del self._rpc_gates[run_id]

    async def invoke_rpc(self, flow_id: str, req: InvokeRpcRequest) -> msgspec.Raw | None:
        """Run an RPC on a Worker and commit its effects; return its output.

        With ``req.request_id`` the invocation is idempotent per run: the first one that
        succeeds is recorded with its effects, and any later (or concurrent) invocation
        with the same ``request_id`` returns that output without running or applying
        anything again. A failed invocation is not recorded.
        """
        if req.request_id:
            _flows.check_rpc_request_id(req.request_id)
            found = await self.store.run(lambda tx: _flows.rpc_recorded(tx, flow_id, req))
            if found is not None:
                return _raw_output(found[0])
        try:
            result, run_id = await self._invoke_rpc(flow_id, req)
        except _flows.RpcAlreadyDoneError as done:
            return _raw_output(done.output)
        if req.request_id and not _flows.has_effects(result):
            # nothing was committed: record the output alone (the first one recorded wins)
            request_id, output = req.request_id, _flows.rpc_output_bytes(result)
            recorded = await self.store.run(
                lambda tx: _flows.record_rpc(tx, run_id, request_id, output, time.time())
            )
            return _raw_output(recorded)
        return result.rpc_output

    async def _invoke_rpc(self, flow_id: str, req: InvokeRpcRequest) -> tuple[TaskResult, str]:
        """Run the RPC and commit its effects (with its request_id, if any); its result."""
        mark = self.store.submitted
        first = await self._rpc_snapshot(flow_id, req, build=not self.shared)
        flow, task, transactional, locks, timeout = first
        env = Envelope(
            kind="rpc",
            flow_type=flow.flow_type,
            run_id=flow.run_id,
            execution_id=None,
            attempt=1,
            locks=locks,
            timeout_s=timeout,
            heartbeat_timeout_s=None,
            task=task,
        )
        conflict = ServiceError(
            ErrorCode.RPC_LOCK_CONFLICT, f"a lock of RPC {req.rpc_name!r} is held", flow_id=flow_id
        )
        if locks and not self.dispatcher.try_lock_rpc(env):
            raise conflict
        run_id = flow.run_id
        # with several servers the keys and the commit hold are also taken in the store
        holder = _locks.rpc_holder(uuid.uuid4().hex) if self.shared else None
        in_store = False
        gate = self._enter_gate(run_id) if transactional else None
        gated = False
        try:
            if holder is not None and locks:
                in_store = True
                if not await self.store.run(
                    lambda tx: _locks.take_for_rpc(tx, run_id, locks, holder)
                ):
                    raise conflict
            if gate is not None:
                await gate.acquire()
                gated = True
                self._commit_holds[run_id] = asyncio.Event()
                if holder is not None:
                    in_store = True
                    await self._hold_commits(run_id, holder, timeout)
                # no Step result commits in between from here on
                snapshot = await self._rpc_snapshot_again(flow_id, req, first, mark)
                flow, task, transactional, locks, timeout = snapshot
                env.task = task
            result = await self._call_rpc(env, timeout)
            if result.error is not None:
                raise ServiceError(
                    ErrorCode.WORKER_API_ERROR,
                    f"RPC {req.rpc_name!r} failed: {result.error.error_type}: "
                    f"{result.error.message}",
                    detail=result.error.stack,
                    flow_id=flow_id,
                    worker_error_type=result.error.error_type,
                    worker_error_detail=result.error.message,
                )
            if _flows.has_effects(result):
                if flow.status != "running":
                    raise ServiceError(
                        ErrorCode.FLOW_NOT_ACTIVE,
                        "the Flow is closed; an RPC on a closed Flow must have no effects",
                        flow_id=flow_id,
                    )
                # the keys (and the commit hold) it took in the store must still be its own
                fence = (
                    ([*locks, _locks.COMMIT_KEY] if transactional else list(locks))
                    if (in_store and holder is not None)
                    else []
                )
                own = holder if gated else None

                def commit(tx: Tx) -> Effects:
                    if fence and holder is not None:
                        _locks.check_held(tx, run_id, fence, holder)
                    return _flows.rpc_commit(
                        tx,
                        self.limits,
                        self.specs,
                        run_id,
                        req,
                        result,
                        transactional,
                        time.time(),
                        holder=own,
                    )

                # a plain RPC's effects wait for a transactional RPC holding the run
                eff = await (
                    self.store.submit(commit, inline=True)
                    if gated
                    else self.after_holds(run_id, commit, inline=True)
                )
                self.apply(eff)
                # the tasks it made ready leave before the client's answer is written
                self.dispatcher.flush()
            return result, run_id
        finally:
            try:
                if in_store and holder is not None:
                    await self._release_rpc(run_id, holder)
            finally:
                # also when the caller is cancelled while the store frees the keys: the
                # run's gate and its entry must not stay behind
                self.dispatcher.release_locks(env)
                if gate is not None and gated:
                    hold = self._commit_holds.pop(run_id, None)
                    if hold is not None:
                        hold.set()
                    gate.release()
                if gate is not None:
                    self._leave_gate(run_id)

    def _rpc_snapshot(
        self, flow_id: str, req: InvokeRpcRequest, *, build: bool = True
    ) -> asyncio.Future[tuple[FlowRecord, Task | None, bool, list[str], float]]:
        # the RPC's store jobs are small and on a client's wait: an idle SQLite store runs
        # them on the loop, without the writer thread hand-offs
        return self.store.submit(
            lambda tx: _flows.rpc_snapshot(tx, self.specs, flow_id, req, build=build),
            inline=True,
        )

    async def _rpc_snapshot_again(
        self,
        flow_id: str,
        req: InvokeRpcRequest,
        first: tuple[FlowRecord, Task | None, bool, list[str], float],
        mark: int,
    ) -> tuple[FlowRecord, Task | None, bool, list[str], float]:
        # The first snapshot (asked for when the store had seen ``mark`` jobs) still stands
        # if it holds the task and nothing but it reached the store since: this server
        # alone writes the store, in order.
        if first[1] is not None and self.store.submitted == mark + 1:
            return first
        return await self._rpc_snapshot(flow_id, req)

    async def _release_rpc(self, run_id: str, holder: str) -> None:
        try:
            await self.store.run(lambda tx: _locks.release_rpc(tx, run_id, holder))
        except Exception:
            # the keys stay recorded until the store takes the release: keep trying
            log.warning("freeing the locks of an RPC failed; retrying", exc_info=True)
            self._spawn(self._release_rpc_later(run_id, holder))

    async def _release_rpc_later(self, run_id: str, holder: str) -> None:
        delay = 0.1
        while True:
            await asyncio.sleep(delay)
            try:
                await self.store.run(lambda tx: _locks.release_rpc(tx, run_id, holder))
                return
            except Exception:
                delay = min(delay * 2, 5.0)

    async def _hold_commits(self, run_id: str, holder: str, timeout_s: float) -> None:
        """Hold the run's Step commits for ``holder``, waiting while another server holds them."""
        deadline = time.monotonic() + timeout_s
        while not await self.store.run(lambda tx: _locks.hold_commits(tx, run_id, holder)):
            if time.monotonic() > deadline:
                raise ServiceError(
                    ErrorCode.REQUEST_TIMEOUT,
                    "another server's transactional RPC held the Flow for the whole timeout",
                )
            await self.await_unlock()

    async def _call_rpc(self, env: Envelope, timeout: float) -> TaskResult:
        if self.shared and not self.dispatcher.serves(env.flow_type):
            # this server has no Worker for the Flow type: hand the call to one that has
            return await self._rpc_errors(env, self.cluster.call_remote(env, timeout))
        return await self.run_rpc_locally(env, timeout)

    async def run_rpc_locally(self, env: Envelope, timeout: float) -> TaskResult:
        """Run an RPC task on a Worker connected to this server."""
        fut: asyncio.Future[TaskResult] = asyncio.get_running_loop().create_future()
        env.result = fut
        env.locks_held = False  # RPC locks are held by invoke_rpc, not the queue
        saved_locks, env.locks = env.locks, []
        self.dispatcher.offer(env)
        env.locks, env.locks_held = saved_locks, bool(saved_locks)
        return await self._rpc_errors(env, self._rpc_result(env, fut, timeout))

    @staticmethod
    async def _rpc_result(
        env: Envelope, fut: asyncio.Future[TaskResult], timeout: float
    ) -> TaskResult:
        try:
            async with asyncio.timeout(timeout + 1.0):
                return await fut
        except TimeoutError:
            if env.started_at == 0.0:  # never dispatched: it waited for a Worker in vain
                env.cancelled = True
                raise RpcNoWorkerError(
                    f"no Worker took the RPC of Flow type {env.flow_type!r} within its "
                    f"timeout of {env.timeout_s:g}s"
                ) from None
            raise

    @staticmethod
    async def _rpc_errors(env: Envelope, call: Awaitable[TaskResult]) -> TaskResult:
        try:
            return await call
        except RpcNoWorkerError as exc:
            raise ServiceError(
                ErrorCode.NO_WORKER_AVAILABLE,
                str(exc) or f"no Worker took the RPC of Flow type {env.flow_type!r} in time",
            ) from None
        except (RpcTimeoutError, TimeoutError):
            env.cancelled = True
            raise ServiceError(ErrorCode.REQUEST_TIMEOUT, "the RPC timed out") from None
        except RpcLostError as exc:
            raise ServiceError(ErrorCode.WORKER_API_ERROR, str(exc)) from None

    # ------------------------------------------------------------------ loops

    async def _lease_loop(self) -> None:
        outage = Outage("the lease check")
        pruned = time.monotonic()
        while True:
            await asyncio.sleep(0.1)
            try:
                self.dispatcher.check()
                if time.monotonic() - pruned > _VERSIONS_PRUNE_S:
                    pruned = time.monotonic()
                    self.prune_versions()
            except Exception as exc:
                await asyncio.sleep(outage.failed(exc))
            else:
                outage.ok()

    async def _timer_loop(self) -> None:
        # other servers add timers too: look at the store often when it is shared
        every = 1.0 if self.shared else _TIMER_HORIZON_S / 2
        outage = Outage("loading due Timers")
        self._refill_at = 0.0
        while True:
            now = time.time()
            if now >= self._refill_at:
                horizon = now + _TIMER_HORIZON_S
                try:
                    rows = await self.store.run(
                        lambda tx, h=horizon: tx.timers.due_before(h, 100_000)  # type: ignore[misc]
                    )
                except Exception as exc:
                    self.health.note(exc)
                    self._refill_at = time.time() + outage.failed(exc)
                else:
                    outage.ok()
                    self._refill_at = time.time() + every
                    known = set(self._timers)
                    for r in rows:
                        if r not in known:
                            heapq.heappush(self._timers, r)
            now = time.time()
            while self._timers and self._timers[0][0] <= now:
                fire_at, run_id, eid = heapq.heappop(self._timers)
                self._spawn(self._fire(run_id, eid, fire_at))
            delay = self._refill_at - now
            if self._timers:
                delay = min(delay, self._timers[0][0] - now)
            self._timer_wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, min(delay, 30.0))):
                    await self._timer_wake.wait()

    def _refill_soon(self, delay: float) -> None:
        """Load due Timers from the store again within ``delay`` seconds."""
        self._refill_at = min(self._refill_at, time.time() + delay)
        self._timer_wake.set()

    async def _fire(self, run_id: str, eid: str, fire_at: float) -> None:
        try:
            eff = await self.after_holds(
                run_id,
                lambda tx: _steps.fire_timer(
                    tx, self.limits, self.specs, run_id, eid, fire_at, time.time()
                ),
            )
        except Exception as exc:
            # nothing committed, the Timer's row is still there: the next load fires it
            self.health.note(exc)
            self._refill_soon(self._fire_outage.failed(exc))
            return
        self._fire_outage.ok()
        self.apply(eff)

    async def _retention_loop(self) -> None:
        outage = Outage("the retention sweep")
        while True:
            try:
                gone = await self.store.run(lambda tx: _flows.sweep(tx, time.time()), alone=True)
                for flow_type, flow_id in gone:
                    self.streams.drop_flow(flow_type, flow_id)
            except Exception as exc:
                self.health.note(exc)
                delay = min(outage.failed(exc), self.config.retention_sweep_interval_s)
            else:
                outage.ok()
                delay = self.config.retention_sweep_interval_s
            await asyncio.sleep(delay)

    async def _probe_loop(self) -> None:
        """Ask the store for an empty transaction every second: what ``/v1/health`` shows."""
        outage = Outage("the store probe")
        while True:
            try:
                async with asyncio.timeout(_PROBE_TIMEOUT_S):
                    await self.store.run(_probe)
            except TimeoutError:
                # leave the reason to StoreHealth: the last answer grows stale
                pass
            except Exception as exc:
                self.health.failed(exc)
                outage.failed(exc)
            else:
                self.health.ok()
                outage.ok()
            await asyncio.sleep(_PROBE_EVERY_S)


def _raw_output(output: bytes | None) -> msgspec.Raw | None:
    return msgspec.Raw(output) if output is not None else None


def _probe(tx: Tx) -> None:
    return None


def _log_fenced(exc: _steps.FencedError) -> None:
    log.warning("not committing for an attempt another server took over: %s", exc)
