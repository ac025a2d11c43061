"""Transitions shared by every job: scheduling, matching, closing, history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import msgspec
from dex._protocol import ConditionResultsWire, RecoveryErrorWire

from dex_server.engine import NewExecution, WaitingExecution, channel_demand, match_waits
from dex_server.engine import history as hist
from dex_server.engine.flow_timeout import TIMEOUT_EXECUTION_ID, TimeoutClose, timeout_close
from dex_server.service import _children
from dex_server.service._common import Effects, Limits, ReadyTask, SpecIndex, store_value
from dex_server.service._tasks import SharedSnapshot, build_step_task
from dex_server.store import ExecRecord, FlowRecord, Tx


def append_history(tx: Tx, flow: FlowRecord, type_: str, payload: bytes, now: float) -> None:
    tx.history.append(flow.run_id, flow.next_event_id, now, type_, payload)
    flow.next_event_id += 1


def new_exec(
    tx: Tx,
    limits: Limits,
    flow: FlowRecord,
    idx: SpecIndex,
    new: NewExecution,
    now: float,
    *,
    recovery_error: RecoveryErrorWire | None = None,
    input_blob: str | None = None,
) -> ExecRecord:
    e = ExecRecord(
        run_id=flow.run_id,
        execution_id=new.execution_id,
        step_type=new.step_type,
        from_execution_id=new.from_execution_id,
        phase="wait_for" if idx.has_wait_for(new.step_type) else "execute",
        options=new.options if new.options is not None else idx.options(new.step_type),
        first_attempt_at=now,
        recovery_error=recovery_error,
        input_blob=input_blob,
    )
    if new.input is not None:
        v = store_value(tx, limits, flow.run_id, new.input)
        e.input, e.input_blob = v.value, v.blob
    return e


def schedule(tx: Tx, flow: FlowRecord, e: ExecRecord, now: float, eff: Effects) -> None:
    """Persist ``e`` and make it ready now, or arm a timer for ``not_before``."""
    tx.executions.put(e)
    if e.phase == "waiting":
        return
    if e.phase == "execute" and e.execution_id in flow.fork_outcomes:
        # a single-attempt execute the preserved run committed: never dispatched again
        eff.recorded.append((flow.run_id, e.execution_id))
        return
    if e.not_before > now:
        tx.timers.add(flow.run_id, e.execution_id, e.not_before)
        eff.timers.append((e.not_before, flow.run_id, e.execution_id))
        return
    opts = e.options
    kind: Literal["wait_for", "execute"] = "wait_for" if e.phase == "wait_for" else "execute"
    eff.ready.append(
        ReadyTask(
            run_id=flow.run_id,
            flow_id=flow.flow_id,
            flow_type=flow.flow_type,
            execution_id=e.execution_id,
            kind=kind,
            attempt=e.attempt,
            locks=list(opts.wait_for_locks if kind == "wait_for" else opts.execute_locks),
            timeout_s=opts.wait_for_timeout_s if kind == "wait_for" else opts.execute_timeout_s,
            heartbeat_timeout_s=opts.heartbeat_timeout_s,
            schedule_to_start_s=opts.schedule_to_start_timeout_s,
            task=None,
            record=e,
        )
    )


def prebuild(tx: Tx, flow: FlowRecord, eff: Effects) -> None:
    """Snapshot tasks made ready by this job, after all its writes (pushed right away)."""
    cancelled = set(eff.cancelled)
    shared = SharedSnapshot()
    for r in eff.ready:
        if r.run_id == flow.run_id and r.task is None and not r.locks:
            # schedule() wrote r.record and nothing changes a scheduled record afterwards
            # in the same job unless it cancels it (then it is gone from the store)
            if (r.run_id, r.execution_id) in cancelled:
                e = tx.executions.get(flow.run_id, r.execution_id)
            else:
                e = r.record or tx.executions.get(flow.run_id, r.execution_id)
            if e is not None:
                r.task = build_step_task(tx, flow, e, _unread(r), shared)
                r.version = flow.version
    shared.read(tx, flow.run_id, flow.flow_type)


def _unread(r: ReadyTask) -> Callable[[], None]:
    def unread() -> None:
        # its snapshot could not be read after the commit: the dispatcher builds it anew
        r.task = None

    return unread


def run_matching(
    tx: Tx, flow: FlowRecord, now: float, eff: Effects, limits: Limits | None = None
) -> None:
    """Wake every waiting execution of the run whose Wait is now satisfied.

    A due soft timeout (``sys:timeout_handler-1``) whose policy is FAIL or CANCEL closes
    the run here (``limits`` gives its retention; without it the timer waits for the
    timer loop, which passes them); under HANDLER it becomes an execute task.
    """
    waiting = sorted(
        (e for e in tx.executions.waiting(flow.run_id) if e.wait),
        key=lambda e: e.wait_seq,
    )
    if not waiting:
        return
    names = {
        c.channel or ""
        for e in waiting
        for c in (e.wait.conditions if e.wait else [])
        if c.kind == "channel"
    }
    parked = [WaitingExecution(execution_id=e.execution_id, wait=e.wait) for e in waiting if e.wait]
    # read only the prefix of each backlog the Waits can take, not every pending id
    queues = tx.channels.pending_ids(flow.run_id, names, channel_demand(parked))
    kids = _children.children(tx, (e.wait for e in waiting if e.wait))
    matches = match_waits(parked, queues, now, _children.closed_runs(kids))
    by_id = {e.execution_id: e for e in waiting}
    timed_out: TimeoutClose | None = None
    for m in matches:
        e = by_id[m.execution_id]
        if e.execution_id == TIMEOUT_EXECUTION_ID:
            if limits is None:
                continue  # the caller cannot close the run: the timer loop fires it
            timed_out = _timeout_fired(tx, flow, e, now)
            if timed_out is not None:
                continue
        ids = [mid for group in m.consumed for mid in group]
        taken = tx.channels.take(flow.run_id, ids)
        flow.state_bytes -= sum(len(t.value) for t in taken.values())
        e.condition_results = ConditionResultsWire(
            timers_fired=m.timers_fired,
            channel_values=[[taken[mid].value for mid in group] for group in m.consumed],
            channel_names=m.channel_names,
            subflows=_children.results(e.wait, kids) if e.wait else [],
        )
        e.phase = "execute"
        e.attempt = 1
        e.first_attempt_at = now
        e.not_before = 0.0
        e.wait = None
        tx.timers.clear(flow.run_id, e.execution_id)
        schedule(tx, flow, e, now, eff)
    if timed_out is not None and limits is not None:
        close_flow(
            tx,
            limits,
            flow,
            timed_out.status,
            now,
            eff,
            error_type=timed_out.error_type,
            error_message=timed_out.error_message,
            error_detail=timed_out.error_message,
        )


def _timeout_fired(tx: Tx, flow: FlowRecord, e: ExecRecord, now: float) -> TimeoutClose | None:
    """Record the soft timeout firing; return how it closes the run (None: HANDLER)."""
    spec = flow.timeout
    policy = spec.policy if spec is not None and spec.policy != "default" else "fail"
    timeout_s = spec.timeout_s if spec is not None else 0.0
    append_history(
        tx,
        flow,
        hist.FLOW_TIMEOUT_FIRED,
        hist.flow_timeout_fired(policy=policy, deadline=flow.timeout_at, fired_at=now),
        now,
    )
    return timeout_close(policy, timeout_s)


def cancel_execs(tx: Tx, flow: FlowRecord, ids: list[str], eff: Effects) -> None:
    for eid in ids:
        tx.executions.delete(flow.run_id, eid)
        eff.cancelled.append((flow.run_id, eid))
        # the execution may be running on another server's Worker
        tx.signals.notify("cancel", f"{flow.run_id}\t{eid}")


def close_flow(
    tx: Tx,
    limits: Limits,
    flow: FlowRecord,
    status: str,
    now: float,
    eff: Effects,
    *,
    error_type: str | None = None,
    error_message: str | None = None,
    error_detail: str | None = None,
) -> None:
    """Close the run and record its FlowClosed event.

    ``error_message`` is what the Flow's result reports; ``error_detail`` (which execution
    failed and how, or a stop's reason) is kept in the event only.
    """
    live = [e.execution_id for e in tx.executions.of_run(flow.run_id)]
    cancel_execs(tx, flow, live, eff)
    tx.executions.delete_run(flow.run_id)
    tx.timers.delete_run(flow.run_id)
    tx.locks.release_run(flow.run_id)
    flow.status = status  # type: ignore[assignment]
    flow.closed_at = now
    flow.retain_until = now + limits.retention_s
    flow.error_type = error_type
    flow.error_message = error_message
    flow.closing = False
    completions = [
        {
            "stepType": c.step_type,
            "stepExecutionId": c.step_execution_id,
            "output": c.output,
        }
        for c in flow.completions
    ]
    append_history(
        tx,
        flow,
        hist.FLOW_CLOSED,
        hist.flow_closed(
            status=status,
            error_type=error_type,
            error_message=error_message,
            error_detail=error_detail,
            completions=completions,
        ),
        now,
    )
    eff.closed.append((flow.flow_id, flow.run_id))
    tx.signals.notify("closed", flow.flow_id)
    _children.wake_waiters(tx, flow, now, eff)


def check_graceful(tx: Tx, limits: Limits, flow: FlowRecord, now: float, eff: Effects) -> None:
    if flow.status != "running" or not flow.closing:
        return
    # a soft timeout still waiting for its deadline does not hold the run open
    if not any(
        not (e.execution_id == TIMEOUT_EXECUTION_ID and e.phase == "waiting")
        for e in tx.executions.of_run(flow.run_id)
    ):
        close_flow(tx, limits, flow, "completed", now, eff)


def finish(tx: Tx, flow: FlowRecord, eff: Effects) -> None:
    """Bump the run's version, persist it and snapshot tasks made ready."""
    flow.version += 1
    # continue-as-new once asked, or once the run recorded more events than its
    # FlowConfig's threshold (its first event included, so a new run never rolls over
    # before doing anything); update_flow_config may change the threshold at any time
    threshold = (flow.config.continue_as_new_threshold if flow.config else None) or 0
    if flow.status == "running" and (
        flow.continue_pending or 0 < threshold < flow.next_event_id - 1
    ):
        flow.continue_pending = True
        eff.continue_as_new.append(flow.run_id)
    tx.flows.update(flow)
    eff.versions[flow.run_id] = flow.version
    if flow.status == "running":
        prebuild(tx, flow, eff)


def raw(b: bytes | None) -> msgspec.Raw | None:
    return msgspec.Raw(b) if b is not None else None
