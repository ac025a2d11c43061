"""Several servers on one store: claims, takeover, the pool, wake-ups and remote RPCs.

Every dispatchable execution row names the server that dispatches it (``claimed_by``):
the server whose job made it ready claims it in the same transaction. A server with no
Worker for the Flow type releases it to the pool and signals the other servers, one of
which claims it with ``FOR UPDATE SKIP LOCKED``. A server that stops heartbeating (or
whose database session vanished) is dead: another server takes over its claims and
applies the redelivery rule (durably started → the attempt fails; otherwise the same
attempt again). Claims carry an epoch, and writes for an attempt check it, so a server
that was only stalled or cut off commits nothing for what was taken from it; it drops
those attempts and cancels them on its Workers (:meth:`Cluster.sweep_fenced`). Signals
travel through the store (PostgreSQL ``LISTEN/NOTIFY``); every loop here also polls, so a
lost signal only delays work.

On a store one server owns (SQLite) there is no pool and no signal; takeover runs once at
startup and turns every claim of a previous process into the restart rule.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec
from dex._protocol import ErrorCode, Task, TaskResult

from dex_server.dispatch import Envelope, RpcLostError, RpcNoWorkerError, RpcTimeoutError
from dex_server.service import _steps
from dex_server.service._common import ServiceError
from dex_server.service._loops import Outage
from dex_server.store import Tx

if TYPE_CHECKING:
    from dex_server.service._runtime import Runtime

log = logging.getLogger("dex_server.cluster")

_POLL_S = 1.0
_ORPHAN_SWEEPS = 2


class RemoteRpc(msgspec.Struct, kw_only=True):
    """An RPC handed to another server's Workers through the store."""

    run_id: str
    flow_type: str
    timeout_s: float
    task: Task


class RemoteRpcResult(msgspec.Struct, kw_only=True):
    result: TaskResult | None = None
    error_code: str | None = None
    error_message: str = ""


_rpc_encoder = msgspec.json.Encoder()
_rpc_decoder = msgspec.json.Decoder(RemoteRpc)
_rpc_result_decoder = msgspec.json.Decoder(RemoteRpcResult)


class Cluster:
    """The multi-server side of a :class:`Runtime` (also run, mostly idle, on SQLite)."""

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.store = runtime.store
        self.shared = runtime.store.shared
        self.lease_s = runtime.config.server_lease_s
        self._rpc_waiters: dict[str, asyncio.Future[None]] = {}
        self._suspects: set[tuple[str, str]] = set()
        self._claiming: set[str] = set()
        self._loops: list[asyncio.Task[None]] = []

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        await self.take_over()
        self.store.start_signals(self._on_signal)
        self._loops = [self.rt.start_loop("cluster poll", self._loop)]

    async def stop(self) -> None:
        for t in self._loops:
            t.cancel()
        for t in self._loops:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _loop(self) -> None:
        # one server per store: nobody else can die, takeover ran at startup
        steps: tuple[Callable[[], Awaitable[None]], ...] = (
            (self.take_over, self.sweep_orphans, self._poll_shared)
            if self.shared
            else (self.sweep_orphans,)
        )
        outages = {step: Outage(f"cluster {step.__name__}", log) for step in steps}
        while True:
            await asyncio.sleep(_POLL_S if self.shared else 5 * _POLL_S)
            for step in steps:
                try:
                    await step()
                except Exception as exc:
                    self.rt.health.note(exc)
                    outages[step].failed(exc)
                else:
                    outages[step].ok()

    async def _poll_shared(self) -> None:
        if not self.shared:
            return
        await self.rt.refresh_specs()
        for flow_type in self.rt.dispatcher.served_types():
            await self.claim_pool(flow_type)
            await self.claim_rpcs(flow_type)
        await self.fail_unserved()

    # ------------------------------------------------------------------ signals

    def _on_signal(self, kind: str, data: str) -> None:
        rt = self.rt
        if kind in ("ready", "closed", "cancel", "unlock"):
            rt.changes.bump()  # another server committed a change: live readers look again
        if kind == "ready":
            rt._spawn(self.claim_pool(data))
        elif kind == "rpc":
            rt._spawn(self.claim_rpcs(data))
        elif kind == "rpcdone":
            fut = self._rpc_waiters.get(data)
            if fut is not None and not fut.done():
                fut.set_result(None)
        elif kind == "closed":
            rt.flow_closed_elsewhere(data)
        elif kind == "cancel":
            run_id, _, eid = data.partition("\t")
            rt.dispatcher.cancel(run_id, eid, "the Step was cancelled")
        elif kind == "spec":
            rt._spawn(rt.refresh_specs())
        elif kind == "stream":
            rt.streams.wake(data)
        elif kind == "unlock":
            rt.wake_unlock()

    # ------------------------------------------------------------------ claims

    async def take_over(self) -> None:
        """Take the claims of dead servers (all earlier processes, on a one-server store)."""
        rt, now = self.rt, time.time()
        eff = await self.store.run(
            lambda tx: _steps.take_over(tx, rt.limits, rt.specs, now, self.lease_s)
        )
        rt.apply(eff)

    async def sweep_orphans(self) -> None:
        """Redeliver executions claimed by this server that it no longer tracks.

        A commit whose outcome was lost (the database connection died) leaves such
        claims; one seen in two sweeps in a row is recovered like a dead server's.
        """
        if self.shared:
            await self.sweep_fenced()
        now = time.time()
        mine = await self.store.run(lambda tx: tx.claims.mine_ready(now))
        known = self.rt.dispatcher.by_exec
        orphans = {k for k in mine if k not in known}
        confirmed = sorted(orphans & self._suspects)
        self._suspects = orphans - set(confirmed)
        if not confirmed:
            return
        rt = self.rt
        log.warning("recovering %d executions this server lost track of", len(confirmed))
        eff = await self.store.run(
            lambda tx: _steps.recover_claimed(tx, rt.limits, rt.specs, confirmed, time.time())
        )
        rt.apply(eff)

    async def sweep_fenced(self) -> None:
        """Drop the attempts (queued or running) whose executions another server took over.

        This server was cut off or stalled for longer than the lease; the attempts' writes
        would be refused anyway (see ``_steps._load``), so they are not sent, and running
        ones are cancelled on their Workers.
        """
        mine = {
            k: env for k, env in self.rt.dispatcher.by_exec.items() if env.claim_epoch is not None
        }
        if not mine:
            return
        held = [(k[0], k[1], env.claim_epoch or 0) for k, env in mine.items()]
        lost = await self.store.run(lambda tx: tx.claims.lost(held))
        if lost:
            log.warning("%d attempts were taken over by another server; dropping them", len(lost))
        for key in lost:
            self.rt.fenced(mine[key])

    def release(self, env: Envelope) -> None:
        """Give a ready execution no local Worker serves to the pool (other servers)."""
        rt = self.rt
        assert env.execution_id is not None
        run_id, eid, attempt, kind = env.run_id, env.execution_id, env.attempt, env.kind
        # the pool keeps what is left of its schedule-to-start wait
        limit = rt.dispatcher.schedule_to_start(env)
        start_by = (
            None if limit is None else time.time() + limit - (time.monotonic() - env.enqueued_at)
        )

        def job(tx: Tx) -> None:
            e = tx.executions.get(run_id, eid)
            phase = "wait_for" if kind == "wait_for" else "execute"
            if e is None or e.attempt != attempt or e.phase != phase:
                return
            tx.claims.release(run_id, eid, time.time(), start_by)
            tx.signals.notify("ready", env.flow_type)

        async def go() -> None:
            try:
                await self.store.run(job)
            finally:
                rt.dispatcher.finished(env)

        rt._spawn(go())

    async def claim_pool(self, flow_type: str) -> None:
        free = self.rt.dispatcher.free_step_slots(flow_type)
        if free <= 0 or flow_type in self._claiming:
            return
        self._claiming.add(flow_type)
        try:
            rt, now = self.rt, time.time()
            eff = await self.store.run(
                lambda tx: _steps.claim_pool(tx, rt.limits, rt.specs, flow_type, now, free)
            )
        finally:
            self._claiming.discard(flow_type)
        self.rt.apply(eff)

    async def fail_unserved(self) -> None:
        """Fail pooled attempts no server's Worker took within their schedule-to-start."""
        rt, now = self.rt, time.time()
        default = rt.dispatcher.schedule_to_start_s
        eff = await self.store.run(
            lambda tx: _steps.fail_unserved(tx, rt.limits, rt.specs, now, default)
        )
        rt.apply(eff)

    # ------------------------------------------------------------------ remote RPCs

    async def call_remote(self, env: Envelope, timeout: float) -> TaskResult:
        """Run an RPC on another server's Worker: the request and result go through the store."""
        assert env.task is not None
        call_id = uuid.uuid4().hex
        request = _rpc_encoder.encode(
            RemoteRpc(run_id=env.run_id, flow_type=env.flow_type, timeout_s=timeout, task=env.task)
        )
        flow_type = env.flow_type

        def add(tx: Tx) -> None:
            tx.rpc_calls.add(call_id, flow_type, timeout, request, time.time())
            tx.signals.notify("rpc", flow_type)

        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._rpc_waiters[call_id] = fut
        started = time.monotonic()
        try:
            await self.store.run(add)
            while True:
                state = await self.store.run(lambda tx: tx.rpc_calls.state(call_id))
                if state is None:
                    raise RpcLostError("the RPC call disappeared")
                claimed, raw = state
                if raw is not None:
                    return self._result(raw)
                waited = time.monotonic() - started
                # an RPC waits for a Worker up to its own timeout
                if not claimed and waited > timeout:
                    if await self.store.run(lambda tx: tx.rpc_calls.withdraw(call_id)):
                        raise RpcNoWorkerError(
                            f"no Worker of any server took the RPC of Flow type {flow_type!r}"
                            f" within its timeout of {timeout:g}s"
                        )
                if waited > timeout + 1.0:
                    raise RpcTimeoutError("the RPC timed out")
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_POLL_S / 2):
                        await asyncio.shield(fut)
                if fut.done():
                    fut = asyncio.get_running_loop().create_future()
                    self._rpc_waiters[call_id] = fut
        finally:
            self._rpc_waiters.pop(call_id, None)
            with contextlib.suppress(Exception):
                await self.store.run(lambda tx: tx.rpc_calls.delete(call_id))

    @staticmethod
    def _result(raw: bytes) -> TaskResult:
        res = _rpc_result_decoder.decode(raw)
        if res.result is not None:
            return res.result
        if res.error_code == ErrorCode.REQUEST_TIMEOUT:
            raise RpcTimeoutError(res.error_message)
        if res.error_code == ErrorCode.NO_WORKER_AVAILABLE:
            raise RpcNoWorkerError(res.error_message)
        raise RpcLostError(res.error_message)

    async def claim_rpcs(self, flow_type: str) -> None:
        if not self.rt.dispatcher.serves(flow_type):
            return
        calls = await self.store.run(lambda tx: tx.rpc_calls.claim([flow_type], 16))
        for call_id, raw in calls:
            req = _rpc_decoder.decode(raw)
            self.rt._spawn(self._serve_rpc(call_id, req))

    async def _serve_rpc(self, call_id: str, req: RemoteRpc) -> None:
        env = Envelope(
            kind="rpc",
            flow_type=req.flow_type,
            run_id=req.run_id,
            execution_id=None,
            attempt=1,
            locks=[],
            timeout_s=req.timeout_s,
            heartbeat_timeout_s=None,
            task=req.task,
        )
        out: RemoteRpcResult
        try:
            result = await self.rt.run_rpc_locally(env, req.timeout_s)
            out = RemoteRpcResult(result=result)
        except ServiceError as exc:
            out = RemoteRpcResult(error_code=exc.code, error_message=exc.message)
        except Exception as exc:  # pragma: no cover - reported to the caller
            out = RemoteRpcResult(error_code=ErrorCode.INTERNAL, error_message=str(exc))
        encoded = _rpc_encoder.encode(out)

        def finish(tx: Tx) -> None:
            tx.rpc_calls.finish(call_id, encoded)
            tx.signals.notify("rpcdone", call_id)

        await self.store.run(finish)


__all__ = ["Cluster", "RemoteRpc"]
