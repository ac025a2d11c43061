"""Jobs of time travel and continue-as-new: new runs of a Flow ID made from an old one.

Time travel plans the fork with :func:`dex_server.engine.forks.plan_fork` and writes the
new run; continue-as-new moves a quiescent run's live state into a new run. Both keep the
old run, closed, readable by its run ID until retention.
"""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec
from dex._protocol import (
    TIMEOUT_HANDLER_STEP,
    CompletionWire,
    DecisionSpec,
    ErrorCode,
    ErrorInfo,
    Publish,
    TaskResult,
    TimeTravelRequest,
)

from dex_server.engine import InvalidDecisionError, NewExecution, plan_movements
from dex_server.engine import history as hist
from dex_server.engine.forks import (
    FLOW_CONTINUED,
    RECORDED_OUTCOME_TAKEN,
    TIME_TRAVEL_FORK,
    ForkPlan,
    ForkPointError,
    HistoryRow,
    plan_fork,
)
from dex_server.engine.history import blob_reference
from dex_server.engine.ids import new_uuid7
from dex_server.service._common import (
    Effects,
    LimitError,
    Limits,
    ServiceError,
    SpecIndex,
    Specs,
    history_value,
    store_value,
)
from dex_server.service._flowops import (
    append_history,
    check_graceful,
    close_flow,
    finish,
    new_exec,
    run_matching,
    schedule,
)
from dex_server.service._flows import arm_timeout, require_flow
from dex_server.service._steps import AttemptRef, apply_step_result, write_index
from dex_server.store import ExecRecord, FlowRecord, Tx

OUTCOME_UNKNOWN = "OUTCOME_UNKNOWN"

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
_T = TypeVar("_T")


def _as(value: Any, type_: type[_T]) -> _T:
    """Decode a decoded JSON value into a wire struct (its raw fields need the bytes)."""
    return msgspec.json.decode(_enc.encode(value), type=type_)


_PAGE = 1000


def _history(tx: Tx, run_id: str) -> list[HistoryRow]:
    rows: list[HistoryRow] = []
    while True:
        page = tx.history.page(run_id, rows[-1][0] if rows else 0, _PAGE)
        rows += page
        if len(page) < _PAGE:
            return rows


def _gone(run_id: str, flow_id: str) -> ServiceError:
    return ServiceError(
        ErrorCode.BAD_REQUEST,
        f"time travel: run {run_id}, which this Flow's history continues, is gone (past retention)",
        flow_id=flow_id,
    )


def _lineage(tx: Tx, flow: FlowRecord) -> list[tuple[str, HistoryRow]]:
    """The run's history as one sequence from a start: ``(run_id, row)``.

    A run made by time travel continues the part of its preserved run's history before
    the fork point (and that run's, if it was forked too); a run made by continue-as-new
    starts from the state its ``FlowContinued`` event carried, as a new history does (the
    earlier runs are not needed, and may be gone).
    """
    chain: list[list[HistoryRow]] = []
    runs: list[str] = []
    while True:
        rows = _history(tx, flow.run_id)
        chain.append(rows)
        runs.append(flow.run_id)
        if not rows or rows[0][2] != TIME_TRAVEL_FORK:
            break
        first = _dec.decode(rows[0][3])
        prev = tx.flows.get(str(first.get("previousRunId", "")))
        if prev is None or prev.flow_id != flow.flow_id:
            raise _gone(str(first.get("previousRunId")), flow.flow_id)
        flow = prev
    seq = [(runs[-1], r) for r in chain[-1]]
    for run_id, rows in zip(reversed(runs[:-1]), reversed(chain[:-1]), strict=True):
        first = _dec.decode(rows[0][3])
        at = (first.get("targetRunId"), int(first.get("targetEventId", 0)))
        keep = next((i for i, (r, row) in enumerate(seq) if r == at[0] and row[0] >= at[1]), None)
        seq = seq[:keep] + [(run_id, r) for r in rows[1:]]
    return seq


def _resolve(tx: Tx, raw: bytes) -> bytes:
    """The value's bytes; a history blob reference is looked up in the blob store."""
    if raw.startswith(b'{"__dexBlobReference"'):
        ref = _dec.decode(raw)["__dexBlobReference"]
        data = tx.blobs.get(str(ref["id"]))
        if data is None:
            raise ServiceError(ErrorCode.INTERNAL, f"blob {ref['id']} of the history is gone")
        return data
    return raw


def _single_attempt(idx: SpecIndex) -> Any:
    def check(step_type: str) -> bool:
        if step_type not in idx.step_types:
            return False
        return idx.options(step_type).execute_retry.maximum_attempts == 1

    return check


def time_travel(
    tx: Tx, limits: Limits, specs: Specs, flow_id: str, req: TimeTravelRequest, now: float
) -> tuple[str, Effects]:
    """Fork the Flow ID's latest run at ``req``'s point into a new running run.

    A running old run is terminated (one running run per Flow ID); either way it stays
    readable by its run ID. Returns the new run ID.

    Raises:
        ServiceError: ``FLOW_NOT_FOUND`` for an unknown Flow ID; ``BAD_REQUEST`` when the
            fork point is missing or names nothing in the history (nothing is written).
        LimitError: the forked state would exceed ``max_flow_state_bytes``.

    """
    eff = Effects()
    old = require_flow(tx, flow_id)
    idx = specs.of_run(tx, old)
    single = _single_attempt(idx)
    lineage = _lineage(tx, old)
    # one numbering for the whole lineage; each entry remembers its run and event ID
    rows = [(i, r[1], r[2], r[3]) for i, (_, r) in enumerate(lineage, 1)]
    try:
        plan = plan_fork(
            rows,
            req.type,
            step_types=idx.step_types,
            single_attempt=single,
            event_time=req.history_event_time,
            step_type=req.step_type,
            execution_id=req.step_execution_id,
            method=req.step_method,
            skip_writes_reapply=req.skip_writes_reapply,
            rerun_single_attempt=req.rerun_single_attempt,
        )
    except ForkPointError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"time travel: {exc}", flow_id=flow_id) from None
    origin = [(run, r[0]) for run, r in lineage]
    end = (old.run_id, old.next_event_id)  # after the whole history: nothing is dropped
    target = origin[plan.cut_event_id - 1] if plan.cut_event_id <= len(origin) else end
    reapplied = [origin[r.event_id - 1] for r in plan.reapplied]
    unknown: list[str] = []
    if old.status == "running":
        # a single-attempt execute in flight whose start is durable may have had its effect
        for rec in tx.executions.of_run(old.run_id):
            started = rec.phase == "execute" and rec.started_attempt == rec.attempt > 0
            if started and single(rec.step_type):
                if req.rerun_single_attempt:
                    plan.rerun.append(rec.execution_id)
                else:
                    unknown.append(rec.execution_id)
                    plan.recorded[rec.execution_id] = _enc.encode(
                        {"stepType": rec.step_type, "unknown": True, "previousRunId": old.run_id}
                    )
    flow = FlowRecord(
        run_id=new_uuid7(),
        flow_id=old.flow_id,
        flow_type=old.flow_type,
        started_at=now,
        input=old.input,
        spec_version=old.spec_version,
        counters=dict(plan.counters),
        completions=[
            CompletionWire(
                step_type=s,
                step_execution_id=e,
                output=msgspec.Raw(o) if o is not None else None,
            )
            for s, e, o in plan.completions
        ],
        closing=plan.closing,
        forked_from=old.run_id,
        fork_outcomes={k: msgspec.Raw(v) for k, v in plan.recorded.items()},
        # the Flow's config goes on; its soft timeout keeps its deadline (armed below)
        config=old.config,
    )
    if old.status == "running":
        close_flow(
            tx,
            limits,
            old,
            "terminated",
            now,
            eff,
            error_message=f"time travel to run {flow.run_id}",
        )
        finish(tx, old, eff)
        # the Flow ID goes on in the new run: its waiters keep waiting
        eff.closed = [c for c in eff.closed if c[1] != old.run_id]
    if not tx.flows.insert(flow):
        raise ServiceError(
            ErrorCode.FLOW_ALREADY_STARTED,
            f"Flow {flow_id!r} got another running run during the time travel",
            flow_id=flow_id,
        )
    append_history(
        tx,
        flow,
        TIME_TRAVEL_FORK,
        _fork_payload(old, plan, req, unknown, target, reapplied),
        now,
    )
    _write_state(tx, limits, idx, flow, plan)
    for x in plan.executions.values():
        if x.step_type == TIMEOUT_HANDLER_STEP:
            continue  # the soft timeout is armed anew below, at the old deadline
        e = new_exec(
            tx,
            limits,
            flow,
            idx,
            NewExecution(
                execution_id=x.execution_id,
                step_type=x.step_type,
                from_execution_id=x.from_execution_id,
                input=_resolve(tx, x.input) if x.input is not None else None,
                options=x.options,
            ),
            now,
        )
        e.locals = {k: msgspec.Raw(v) for k, v in x.locals.items()}
        if x.phase == "waiting" and x.wait is not None:
            _park(tx, flow, e, x.wait, eff)
        else:
            if x.phase == "execute":
                e.phase, e.condition_results = "execute", x.condition_results
            schedule(tx, flow, e, now, eff)
    _reapply(tx, limits, idx, flow, origin, plan, now, eff)
    if old.timeout is not None and old.timeout_at is not None:
        # the Flow's deadline does not move with a fork (a passed one fires at once)
        arm_timeout(tx, flow, idx, old.timeout, now, eff, deadline=old.timeout_at)
    if flow.state_bytes > limits.max_flow_state_bytes:
        raise LimitError(
            "max_flow_state_bytes", flow.state_bytes, limits.max_flow_state_bytes, "forked state"
        )
    run_matching(tx, flow, now, eff)
    check_graceful(tx, limits, flow, now, eff)
    finish(tx, flow, eff)
    return flow.run_id, eff


def _fork_payload(
    old: FlowRecord,
    plan: ForkPlan,
    req: TimeTravelRequest,
    unknown: list[str],
    target: tuple[str, int],
    reapplied: list[tuple[str, int]],
) -> bytes:
    point: dict[str, Any] = {"type": req.type.upper()}
    if req.history_event_time is not None:
        point["historyEventTime"] = req.history_event_time
    if plan.target is not None:
        point["stepExecutionId"] = plan.target
        point["stepMethod"] = (plan.method or "").upper()
    taken = sorted(k for k in plan.recorded if k not in unknown)
    return _enc.encode(
        {
            "previousRunId": old.run_id,
            # the first event not kept: the fork point (in a run of the lineage)
            "targetRunId": target[0],
            "targetEventId": target[1],
            "forkPoint": point,
            "reason": req.reason,
            "skipWritesReapply": req.skip_writes_reapply,
            "reapplied": [{"runId": r, "eventId": e} for r, e in reapplied],
            # the rule for single-attempt Steps, and what it chose for each one
            "singleAttempt": {
                "policy": "rerun" if req.rerun_single_attempt else "take_recorded_outcome",
                "takeRecordedOutcome": taken,
                "outcomeUnknown": sorted(unknown),
                "rerun": sorted(plan.rerun),
            },
        }
    )


def _write_state(tx: Tx, limits: Limits, idx: SpecIndex, flow: FlowRecord, plan: ForkPlan) -> None:
    for name, v in plan.attributes.items():
        value = _resolve(tx, v)
        stored = store_value(tx, limits, flow.run_id, value)
        flow.state_bytes += tx.state.write(flow.run_id, name, stored)
        # the new run's search rows, in the commit that writes its Attributes
        write_index(tx, idx.indexes, flow.run_id, name, value)
    for channel, messages in plan.channels.items():
        for m in messages:
            tx.channels.publish(flow.run_id, channel, new_uuid7(), m)
            flow.state_bytes += len(m)


def _park(tx: Tx, flow: FlowRecord, e: ExecRecord, wait: Any, eff: Effects) -> None:
    flow.wait_seq += 1
    e.phase, e.wait, e.wait_seq = "waiting", wait, flow.wait_seq
    tx.executions.put(e)
    for c in e.wait.conditions if e.wait else []:
        if c.kind == "timer" and c.fire_at is not None:
            tx.timers.add(flow.run_id, e.execution_id, c.fire_at)
            eff.timers.append((c.fire_at, flow.run_id, e.execution_id))


def _reapply(
    tx: Tx,
    limits: Limits,
    idx: SpecIndex,
    flow: FlowRecord,
    origin: list[tuple[str, int]],
    plan: ForkPlan,
    now: float,
    eff: Effects,
) -> None:
    """Apply the recorded effects of the RPCs after the cut, in their order."""
    for r in plan.reapplied:
        for name, v in r.attribute_writes.items():
            value = _resolve(tx, v) if v else None
            stored = store_value(tx, limits, flow.run_id, value) if value else None
            flow.state_bytes += tx.state.write(flow.run_id, name, stored)
            write_index(tx, idx.indexes, flow.run_id, name, value)
        for channel, m in r.publishes:
            tx.channels.publish(flow.run_id, channel, new_uuid7(), m)
            flow.state_bytes += len(m)
        try:
            new, flow.counters = plan_movements(
                r.movements,
                from_execution_id=f"__rpc/{r.rpc_name}",
                step_types=idx.step_types,
                counters=flow.counters,
            )
        except InvalidDecisionError as exc:
            raise ServiceError(ErrorCode.BAD_REQUEST, f"time travel: {exc}") from None
        for n in new:
            schedule(tx, flow, new_exec(tx, limits, flow, idx, n, now), now, eff)
        output = {
            "attributeWrites": {
                k: msgspec.Raw(v) if v else None for k, v in r.attribute_writes.items()
            },
            "publishes": [{"channel": c, "value": msgspec.Raw(m)} for c, m in r.publishes],
            "movements": [{"stepType": m.step_type, "input": m.input} for m in r.movements],
        }
        payload = _enc.encode(
            {
                "rpcName": r.rpc_name,
                "output": output,
                "reappliedFrom": {
                    "runId": origin[r.event_id - 1][0],
                    "eventId": origin[r.event_id - 1][1],
                },
            }
        )
        append_history(tx, flow, hist.RPC_EXECUTION_COMPLETED, payload, now)


def _raw(v: Any) -> msgspec.Raw:
    return msgspec.Raw(_enc.encode(v))


def apply_recorded(
    tx: Tx, limits: Limits, specs: Specs, run_id: str, execution_id: str, now: float
) -> Effects:
    """Commit the recorded outcome of a single-attempt execute instead of running it.

    The outcome goes through the same commit path as a Worker's result, so its Attribute
    writes, publishes and decision apply as they did in the preserved run. A Step durably
    started there with no outcome fails here with ``OUTCOME_UNKNOWN`` (non-retryable; its
    failure route, if any, runs).
    """
    flow = tx.flows.get(run_id)
    if flow is None or flow.status != "running":
        return Effects()
    e = tx.executions.get(run_id, execution_id)
    rec_raw = flow.fork_outcomes.get(execution_id)
    if e is None or rec_raw is None or e.phase != "execute":
        return Effects()
    rec = _dec.decode(rec_raw)
    del flow.fork_outcomes[execution_id]
    if rec.get("stepType") != e.step_type:
        # another Step got this execution id in the new history: it runs
        eff = Effects()
        schedule(tx, flow, e, now, eff)
        finish(tx, flow, eff)
        return eff
    if rec.get("unknown"):
        result = TaskResult(
            task_id="",
            error=ErrorInfo(
                error_type=OUTCOME_UNKNOWN,
                message=f"{execution_id} durably started in run {rec.get('previousRunId')}"
                " and has no recorded outcome; it is not run again",
                non_retryable=True,
            ),
        )
    else:
        ev = rec["event"]
        out = ev.get("output", {})
        result = TaskResult(
            task_id="",
            attribute_writes={
                k: (_raw(v) if v is not None else None)
                for k, v in (out.get("attributeWrites") or {}).items()
            },
            publishes=[
                Publish(channel=p["channel"], value=_raw(p.get("value")))
                for p in out.get("publishes") or []
            ],
            locals={k: _raw(v) for k, v in (out.get("locals") or {}).items()},
            decision=_as(out["decision"], DecisionSpec),
        )
    append_history(
        tx,
        flow,
        RECORDED_OUTCOME_TAKEN,
        _enc.encode(
            {
                "stepExecutionId": execution_id,
                "stepType": e.step_type,
                "previousRunId": flow.forked_from,
                "outcome": "unknown" if rec.get("unknown") else "committed",
            }
        ),
        now,
    )
    tx.flows.update(flow)
    ref = AttemptRef(
        run_id=run_id, execution_id=execution_id, kind="execute", attempt=e.attempt, started_at=now
    )
    return apply_step_result(tx, limits, specs, ref, result, now)


def trigger_continue_as_new(tx: Tx, flow_id: str) -> Effects:
    """Ask a running Flow to continue as new at its next quiescent commit (maybe now).

    Raises:
        ServiceError: ``FLOW_NOT_FOUND`` for an unknown Flow ID, ``FLOW_NOT_ACTIVE`` when
            its latest run is closed.

    """
    eff = Effects()
    flow = require_flow(tx, flow_id)
    if flow.status != "running":
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE, f"Flow {flow_id!r} is {flow.status}", flow_id=flow_id
        )
    flow.continue_pending = True
    finish(tx, flow, eff)
    return eff


def _resumed(e: ExecRecord) -> dict[str, Any]:
    return {
        "stepExecutionId": e.execution_id,
        "stepType": e.step_type,
        "fromStepExecutionId": e.from_execution_id,
        "input": blob_reference(e.input_blob) if e.input_blob else e.input,
        "wait": e.wait,
        "locals": e.locals,
        "options": e.options,
    }


def continue_as_new(tx: Tx, limits: Limits, specs: Specs, run_id: str, now: float) -> Effects:
    """Move a run that asked to continue as new into a new run, if it is quiescent.

    Quiescent: every live Step execution is parked in its Wait (nothing queued or running),
    and no transactional RPC holds the run. Then the new run gets the Attributes, pending
    Channel messages, parked executions with their Waits and timers, counters and
    completions; its history starts with ``FlowContinued``. Otherwise nothing happens: a
    later commit of the run tries again.
    """
    eff = Effects()
    flow = tx.flows.get(run_id)
    if flow is None or flow.status != "running" or not flow.continue_pending:
        return eff
    live = tx.executions.of_run(run_id)
    if flow.commit_hold is not None or any(e.phase != "waiting" for e in live):
        return eff
    idx = specs.of_run(tx, flow)
    new = FlowRecord(
        run_id=new_uuid7(),
        flow_id=flow.flow_id,
        flow_type=flow.flow_type,
        started_at=now,
        request_id=flow.request_id,
        input=flow.input,
        counters=dict(flow.counters),
        completions=list(flow.completions),
        closing=flow.closing,
        wait_seq=flow.wait_seq,
        spec_version=flow.spec_version,
        fork_outcomes=dict(flow.fork_outcomes),
        forked_from=flow.forked_from,
        continued_from=flow.run_id,
        # the config goes on; the soft timeout keeps its deadline: its waiting
        # sys:timeout_handler-1 execution moves over with the other parked ones
        config=flow.config,
        timeout=flow.timeout,
        timeout_at=flow.timeout_at,
    )
    # close the old run first: the store allows one running run per Flow ID
    for e in live:
        tx.executions.delete(run_id, e.execution_id)
    tx.locks.release_run(run_id)
    flow.status = "continued_as_new"
    flow.closed_at = now
    flow.retain_until = now + limits.retention_s
    flow.continue_pending = False
    flow.continued_to = new.run_id
    append_history(
        tx,
        flow,
        hist.FLOW_CLOSED,
        _enc.encode({"status": "continued_as_new", "continuedToRunId": new.run_id}),
        now,
    )
    flow.version += 1
    tx.flows.update(flow)
    eff.versions[flow.run_id] = flow.version
    if not tx.flows.insert(new):
        raise ServiceError(ErrorCode.INTERNAL, f"Flow {flow.flow_id!r} has another running run")
    attributes = tx.state.names(run_id)
    for name in attributes:
        v = tx.state.get(run_id, name)
        if v is None:
            continue
        if v.blob is not None:
            tx.blobs.reference(new.run_id, v.blob)
        new.state_bytes += tx.state.write(new.run_id, name, v)
    # the search rows go with the Attributes, in this commit: a search finds the new run
    tx.search.put_many([(new.run_id, r.key, r.type, r.row) for r in tx.search.of_runs([run_id])])
    channels = [d.name for d in idx.spec.state if d.kind == "channel"]
    maps = [d.name for d in idx.spec.state if d.kind == "channel_map"]
    messages = tx.channels.pending(run_id, channels, maps)
    for m in messages:
        tx.channels.publish(new.run_id, m.channel, m.message_id, bytes(m.value))
        new.state_bytes += len(m.value)
    for e in live:
        e.run_id = new.run_id
        e.claimed_by, e.claim_epoch = None, 0
        tx.executions.put(e)
        for c in e.wait.conditions if e.wait else []:
            if c.kind == "timer" and c.fire_at is not None:
                tx.timers.add(new.run_id, e.execution_id, c.fire_at)
                eff.timers.append((c.fire_at, new.run_id, e.execution_id))
    append_history(
        tx,
        new,
        FLOW_CONTINUED,
        _enc.encode(
            {
                "previousRunId": flow.run_id,
                "flowType": new.flow_type,
                # what the new run starts from (time travel replays it once the
                # earlier runs are gone); large values are blob references
                "continuedStart": {
                    "attributes": {
                        name: history_value(v)
                        for name, v in tx.state.of_names(new.run_id, attributes).items()
                    },
                    "pendingChannelMessages": [
                        {"channel": m.channel, "value": m.value} for m in messages
                    ],
                    "stepsToResume": [_resumed(e) for e in live],
                    "counters": new.counters,
                    "completedSteps": [
                        {
                            "stepType": c.step_type,
                            "stepExecutionId": c.step_execution_id,
                            "output": c.output,
                        }
                        for c in new.completions
                    ],
                    "closing": new.closing,
                },
            }
        ),
        now,
    )
    run_matching(tx, new, now, eff)
    finish(tx, new, eff)
    return eff
