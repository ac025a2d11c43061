"""Jobs of Step methods: results, failures, durable starts, timers, restart recovery."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import msgspec
from dex._protocol import (
    CompletionWire,
    DecisionSpec,
    ErrorCode,
    ErrorInfo,
    RecoveryErrorWire,
    TaskResult,
    WaitSpec,
    task_digest,
)

from dex_server.dispatch import SCHEDULE_TO_START_TIMEOUT, schedule_to_start_error
from dex_server.engine import (
    InvalidDecisionError,
    LiveExecution,
    NewExecution,
    UndeclaredStateError,
    check_attribute_names,
    check_channel_names,
    decide_retry,
    plan_decision,
    resolve_timers,
)
from dex_server.engine import history as hist
from dex_server.engine.config import effective_durability
from dex_server.engine.decisions import channels_empty, resolve_conditional_complete
from dex_server.engine.ids import new_uuid7
from dex_server.engine.query import FieldType
from dex_server.engine.search import index_rows
from dex_server.engine.waits import InvalidWaitError, check_wait, inline_wait_usable
from dex_server.service import _children, _locks
from dex_server.service._common import (
    Effects,
    LimitError,
    Limits,
    ServiceError,
    SpecIndex,
    Specs,
    store_value,
)
from dex_server.service._flowops import (
    append_history,
    cancel_execs,
    check_graceful,
    close_flow,
    finish,
    new_exec,
    run_matching,
    schedule,
)
from dex_server.service._tasks import build_step_task
from dex_server.store import ExecRecord, FlowRecord, StoredValue, Tx

INVALID_USER_FLOW_CODE = "INVALID_USER_FLOW_CODE"
# the SDK's own check of a handler result fails the attempt with this error type
_INVALID_CODE_ERRORS = frozenset({INVALID_USER_FLOW_CODE, "InvalidStepResultError"})
# failures the engine itself records (not a handler's exception): the Flow's error message
# names their type, since no message of the user's says what happened
_ENGINE_FAILURES = frozenset(
    {"TIMEOUT", SCHEDULE_TO_START_TIMEOUT, "WORKER_CONNECTION_LOST", "SERVER_RESTARTED"}
    | {v for k, v in vars(ErrorCode).items() if k.isupper() and isinstance(v, str)}
)


class AttemptRef(msgspec.Struct, frozen=True, kw_only=True):
    """Which attempt a Worker frame belongs to."""

    run_id: str
    execution_id: str
    kind: Literal["wait_for", "execute"]
    attempt: int
    started_at: float
    locked: bool = False
    """The attempt holds lock keys in the store (several servers share it)."""
    claim: tuple[str, int] | None = None
    """``(server_id, claim_epoch)`` the attempt was dispatched under; ``None``: not checked."""


class FencedError(Exception):
    """Another server took the attempt's execution over: nothing may be written for it."""

    def __init__(self, ref: AttemptRef, holder: tuple[str | None, int]) -> None:
        super().__init__(
            f"{ref.execution_id} {ref.kind} attempt {ref.attempt}: claimed by {holder[0]!r}"
            f" at epoch {holder[1]}, dispatched under {ref.claim}"
        )
        self.ref = ref


def _load(tx: Tx, ref: AttemptRef) -> tuple[FlowRecord, ExecRecord] | None:
    """The attempt's Flow and execution (row-locked), or ``None`` when the attempt is over.

    The fencing check: every write on behalf of an attempt loads it here first, in its own
    transaction, and raises :class:`FencedError` once the row's claim is no longer the one
    the attempt was dispatched under. A takeover racing this transaction needs the Flow's
    row lock this job holds, so it cannot commit in between; if it claimed the row first,
    this job's write of the row waits for it (a deadlock the database breaks, and the store
    reruns the loser, which then sees the winner's claim).
    """
    flow, e = tx.flows.get_with_execution(ref.run_id, ref.execution_id)
    if flow is None or flow.status != "running":
        return None
    want = "wait_for" if ref.kind == "wait_for" else "execute"
    if e is None or e.attempt != ref.attempt or e.phase != want:
        return None
    if ref.claim is not None and (e.claimed_by, e.claim_epoch) != ref.claim:
        raise FencedError(ref, (e.claimed_by, e.claim_epoch))
    return flow, e


def _release(tx: Tx, ref: AttemptRef) -> None:
    if ref.locked:
        _locks.release(
            tx, ref.run_id, _locks.attempt_holder(ref.execution_id, ref.kind, ref.attempt)
        )


def _context(flow: FlowRecord, e: ExecRecord, ref: AttemptRef, now: float) -> dict[str, Any]:
    o = e.options
    wait_for = ref.kind == "wait_for"
    durability = effective_durability(
        o.wait_for_durability if wait_for else o.execute_durability,
        has_recovery_route=o.wait_for_failure_proceed
        if wait_for
        else o.execute_failure_step is not None,
        flow_default=flow.config.step_durability if flow.config is not None else None,
    )
    return {
        "durability": durability,
        "step_type": e.step_type,
        "execution_id": e.execution_id,
        "from_execution_id": e.from_execution_id,
        "final_attempt": e.attempt,
        "started_time": ref.started_at,
        "duration": max(0.0, now - ref.started_at),
    }


def check_result_limits(
    tx: Tx, limits: Limits, flow: FlowRecord, result: TaskResult
) -> dict[str, int]:
    """Validate value sizes and the Flow state budget.

    Returns the sizes the result's Attribute writes replace, for ``apply_effects``.
    """
    most = limits.max_value_bytes
    delta = 0
    for name, v in result.attribute_writes.items():
        size = _value_size(v)
        if size > most:
            raise LimitError("max_value_bytes", size, most, f"Attribute {name!r}")
        delta += size
    for p in result.publishes:
        size = len(p.value)
        if size > most:
            raise LimitError("max_value_bytes", size, most, f"message to Channel {p.channel!r}")
        delta += size
    movements = list(result.rpc_movements)
    if result.decision is not None:
        movements += result.decision.movements
        limits.check_value(raw_bytes(result.decision.output), "Flow output")
    for m in movements:
        size = _value_size(m.input)
        if size > most:
            raise LimitError("max_value_bytes", size, most, f"input of Step {m.step_type!r}")
    limits.check_value(raw_bytes(result.rpc_output), "RPC output")
    if not result.attribute_writes:
        old: dict[str, int] = {}
    else:
        old = tx.state.sizes_of(flow.run_id, list(result.attribute_writes))
        delta -= sum(old.values())
    if delta > 0 and flow.state_bytes + delta > limits.max_flow_state_bytes:
        raise LimitError(
            "max_flow_state_bytes",
            flow.state_bytes + delta,
            limits.max_flow_state_bytes,
            "Flow state",
        )
    return old


def _value_size(v: msgspec.Raw | None) -> int:
    """The stored size of a raw value (``raw_bytes``'s length; 0 for none or ``null``)."""
    if v is None:
        return 0
    size = len(v)
    return 0 if size == 4 and v == _NULL else size


_NULL = msgspec.Raw(b"null")


def check_result_names(idx: SpecIndex, result: TaskResult, what: str) -> None:
    """Refuse a result that writes state its Flow type's persistence schema does not declare.

    Raises:
        UndeclaredStateError: an Attribute write, a publish or a message deletion names an
            undeclared (or empty) Attribute or Channel.

    """
    names = idx.state_names
    check_attribute_names(names, result.attribute_writes, what)
    check_channel_names(
        names,
        [*(p.channel for p in result.publishes), *(d.channel for d in result.channel_deletes)],
        what,
    )
    d = result.decision
    if d is not None and d.kind == "force_complete_if_channels_empty":
        undeclared = [c for c in d.empty_channels if c not in names.channels] + [
            m for m in d.empty_channel_maps if m not in names.channel_maps
        ]
        if undeclared:
            raise UndeclaredStateError(
                f"{what}: force_complete_if_channels_empty names {undeclared[0]!r}, which the"
                " Flow's persistence schema does not declare as a Channel or ChannelMap"
            )


def raw_bytes(v: msgspec.Raw | None) -> bytes | None:
    """Bytes of a raw value; ``None`` for an absent value or JSON ``null``."""
    if v is None:
        return None
    b = bytes(v)
    return None if b == b"null" else b


def apply_effects(
    tx: Tx,
    limits: Limits,
    flow: FlowRecord,
    result: TaskResult,
    now: float,
    indexes: Mapping[str, tuple[str, FieldType]] | None = None,
    old_sizes: Mapping[str, int] | None = None,
) -> bool:
    """Write Attributes, delete and publish messages. Return whether anything was published.

    An indexed Attribute's search rows are written here too, in the same transaction, so a
    search sees exactly what committed. ``old_sizes``: what ``check_result_limits``
    returned for this result in the same job.
    """
    writes: list[tuple[str, StoredValue | None]] = []
    for name, v in result.attribute_writes.items():
        b = raw_bytes(v)
        writes.append((name, store_value(tx, limits, flow.run_id, b) if b is not None else None))
        if indexes:
            write_index(tx, indexes, flow.run_id, name, b)
    flow.state_bytes += tx.state.write_many(flow.run_id, writes, old_sizes)
    for d in result.channel_deletes:
        size = tx.channels.delete(flow.run_id, d.channel, d.message_id)
        if size is not None:
            flow.state_bytes -= size
    for p in result.publishes:
        tx.channels.publish(flow.run_id, p.channel, new_uuid7(), bytes(p.value))
        flow.state_bytes += len(p.value)
    return bool(result.publishes)


def write_index(
    tx: Tx,
    indexes: Mapping[str, tuple[str, FieldType]],
    run_id: str,
    name: str,
    value: bytes | None,
) -> None:
    """Replace the search rows of Attribute ``name`` (a map instance writes its map's key)."""
    found = indexes.get(name) or indexes.get(name.partition("/")[0] if "/" in name else "")
    if found is not None:
        key, ftype = found
        tx.search.put(run_id, key, ftype.value, index_rows(ftype, value))


def _effects_output(result: TaskResult) -> dict[str, Any]:
    return {
        "attributeWrites": dict(result.attribute_writes),
        "publishes": [{"channel": p.channel, "value": p.value} for p in result.publishes],
        "events": [{"name": ev.name, "value": ev.value} for ev in result.events],
        "locals": dict(result.locals),
    }


def apply_step_result(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    ref: AttemptRef,
    result: TaskResult,
    now: float,
    *,
    inline: bool = False,
) -> Effects:
    eff = Effects()
    loaded = _load(tx, ref)
    if loaded is None:
        return eff
    flow, e = loaded
    if flow.commit_hold is not None:
        raise _locks.CommitHeldError(flow.commit_hold)
    _release(tx, ref)
    if result.error is not None:
        fail_attempt(tx, limits, specs, flow, e, ref, result.error, now, eff)
        finish(tx, flow, eff)
        return eff
    idx = specs.of_run(tx, flow)
    try:
        resolved = _checked_decision(tx, flow, ref, result)
        check_result_names(idx, result, f"{e.execution_id} {ref.kind}")
        old_sizes = check_result_limits(tx, limits, flow, result)
        plan = None
        if resolved is not None:
            # the other live executions matter only to cancellations
            d = resolved
            live = (
                [
                    LiveExecution(
                        execution_id=x.execution_id,
                        step_type=x.step_type,
                        from_execution_id=x.from_execution_id,
                    )
                    for x in tx.executions.of_run(flow.run_id)
                    if x.execution_id != e.execution_id
                ]
                if d.cancel_steps or d.cancel_sibling_steps
                else []
            )
            plan = plan_decision(
                resolved,
                current=LiveExecution(
                    execution_id=e.execution_id,
                    step_type=e.step_type,
                    from_execution_id=e.from_execution_id,
                ),
                live=live,
                step_types=idx.step_types,
                counters=flow.counters,
            )
    except (InvalidDecisionError, UndeclaredStateError, LimitError) as exc:
        code = ErrorCode.LIMIT_EXCEEDED if isinstance(exc, LimitError) else INVALID_USER_FLOW_CODE
        err = ErrorInfo(error_type=code, message=str(exc), non_retryable=True)
        fail_attempt(tx, limits, specs, flow, e, ref, err, now, eff)
        finish(tx, flow, eff)
        return eff
    published = apply_effects(tx, limits, flow, result, now, idx.indexes, old_sizes)
    source = f"#{e.execution_id}"
    eff.streams += [
        (flow.flow_type, w.stream, flow.flow_id, bytes(w.value), source)
        for w in result.stream_writes
    ]
    output = _effects_output(result)
    inp: dict[str, Any] = {"stepInput": e.input, "locals": dict(e.locals)}
    e.locals.update(result.locals)
    if ref.kind == "wait_for":
        assert result.wait is not None
        _apply_wait(tx, flow, e, ref, result.wait, inp, output, now, eff)
        published = True
    else:
        assert plan is not None and result.decision is not None
        inp["conditionResults"] = e.condition_results
        output["decision"] = result.decision
        if inline:
            output["inline"] = True
        if resolved is not None and resolved.kind != result.decision.kind:
            output["resolvedDecision"] = resolved.kind
        append_history(
            tx,
            flow,
            hist.STEP_EXECUTE_COMPLETED,
            hist.step_event(**_context(flow, e, ref, now), input=inp, output=output),
            now,
        )
        tx.executions.delete(flow.run_id, e.execution_id)
        flow.counters = plan.counters
        assert resolved is not None
        if resolved.kind in ("graceful_complete", "force_complete") and (
            plan.completion_output is not None
        ):
            flow.completions.append(
                CompletionWire(
                    step_type=e.step_type,
                    step_execution_id=e.execution_id,
                    output=msgspec.Raw(plan.completion_output),
                )
            )
        cancel_execs(tx, flow, plan.cancel, eff)
        idx = specs.of_run(tx, flow)
        for n in plan.new:
            child = new_exec(tx, limits, flow, idx, n, now)
            if (
                n.wait is not None
                and child.phase == "wait_for"
                and inline_wait_usable(child.options, n.wait)
            ):
                _apply_inline_wait(tx, flow, child, n.wait, now, eff)
                published = True
            else:
                schedule(tx, flow, child, now, eff)
        if plan.close is not None:
            close_flow(
                tx,
                limits,
                flow,
                plan.close.status,
                now,
                eff,
                error_type=plan.close.error_type,
                error_message=plan.close.error_message,
            )
        elif plan.graceful:
            flow.closing = True
    if published and flow.status == "running":
        run_matching(tx, flow, now, eff, limits)
    check_graceful(tx, limits, flow, now, eff)
    _finish_taking_inline(tx, limits, specs, flow, result, now, eff)
    return eff


def _finish_taking_inline(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    flow: FlowRecord,
    result: TaskResult,
    now: float,
    eff: Effects,
) -> None:
    """``finish``, then apply the inline ``execute`` the result carries if it may be taken."""
    taken = _inline_execute(tx, flow, result, eff)
    finish(tx, flow, eff)
    if taken is not None:
        execution_id, outcome = taken
        ref = AttemptRef(
            run_id=flow.run_id, execution_id=execution_id, kind="execute", attempt=1, started_at=now
        )
        eff.merge(apply_step_result(tx, limits, specs, ref, outcome, now, inline=True))


def _inline_execute(
    tx: Tx, flow: FlowRecord, result: TaskResult, eff: Effects
) -> tuple[str, TaskResult] | None:
    """The execution whose ``execute`` outcome comes with ``result`` and may be taken.

    It is taken (and not dispatched) when this job made it ready, its options allow it,
    and the task the server would send it is the one the Worker ran it on.
    """
    ie = result.inline_execute
    if ie is None or ie.result.inline_execute is not None or flow.status != "running":
        return None
    for i, r in enumerate(eff.ready):
        e = r.record
        if r.kind != "execute" or r.execution_id != ie.execution_id or e is None:
            continue
        opts = e.options
        if not opts.execute_inline or opts.execute_locks or r.attempt != 1:
            return None
        if task_digest(build_step_task(tx, flow, e)) != ie.digest:
            return None
        del eff.ready[i]
        return e.execution_id, ie.result
    return None


def _checked_decision(
    tx: Tx, flow: FlowRecord, ref: AttemptRef, result: TaskResult
) -> DecisionSpec | None:
    """The result's decision (a conditional completion decided on the committed counts).

    Raises:
        InvalidDecisionError: the result lacks what its method returns, or its Wait
            cannot be run.

    """
    if ref.kind == "wait_for" and result.wait is None:
        raise InvalidDecisionError("a wait_for result must carry a Wait")
    if ref.kind == "execute" and result.decision is None:
        raise InvalidDecisionError("an execute result must carry a decision")
    if result.wait is not None:
        try:
            check_wait(result.wait)
        except InvalidWaitError as exc:
            raise InvalidDecisionError(str(exc)) from None
    d = result.decision
    if d is None or d.kind != "force_complete_if_channels_empty":
        return d
    empty = channels_empty(
        tx.channels.sizes(flow.run_id),
        channels=d.empty_channels,
        channel_maps=d.empty_channel_maps,
        publishing=[p.channel for p in result.publishes],
    )
    return resolve_conditional_complete(d, empty=empty)


def _apply_wait(
    tx: Tx,
    flow: FlowRecord,
    e: ExecRecord,
    ref: AttemptRef,
    raw_wait: WaitSpec,
    inp: dict[str, Any],
    output: dict[str, Any],
    now: float,
    eff: Effects,
) -> None:
    """Park ``e`` on its Wait (timers made absolute) or queue execute at once."""
    wait = resolve_timers(raw_wait, now)
    output["wait"] = wait
    append_history(
        tx,
        flow,
        hist.STEP_WAIT_FOR_COMPLETED,
        hist.step_event(**_context(flow, e, ref, now), input=inp, output=output),
        now,
    )
    e.attempt, e.first_attempt_at, e.last_failure, e.started_attempt = 1, now, None, 0
    e.last_heartbeat_value = None
    if wait.mode == "skip" or not wait.conditions:
        e.phase = "execute"
        schedule(tx, flow, e, now, eff)
        return
    flow.wait_seq += 1
    e.phase, e.wait, e.wait_seq = "waiting", wait, flow.wait_seq
    tx.executions.put(e)
    for c in wait.conditions:
        if c.kind == "timer" and c.fire_at is not None:
            tx.timers.add(flow.run_id, e.execution_id, c.fire_at)
            eff.timers.append((c.fire_at, flow.run_id, e.execution_id))


def _apply_inline_wait(
    tx: Tx, flow: FlowRecord, e: ExecRecord, wait: WaitSpec, now: float, eff: Effects
) -> None:
    """Record the Wait a Worker computed inline as ``e``'s completed first ``wait_for``."""
    ref = AttemptRef(
        run_id=flow.run_id, execution_id=e.execution_id, kind="wait_for", attempt=1, started_at=now
    )
    inp: dict[str, Any] = {"stepInput": e.input, "locals": {}}
    output = {**_effects_output(TaskResult(task_id="")), "inline": True}
    _apply_wait(tx, flow, e, ref, wait, inp, output, now, eff)


def fail_attempt(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    flow: FlowRecord,
    e: ExecRecord,
    ref: AttemptRef,
    error: ErrorInfo,
    now: float,
    eff: Effects,
    heartbeat_value: msgspec.Raw | None = None,
) -> None:
    """Retry the attempt, or follow the failure route, or fail the Flow."""
    kind = ref.kind
    policy = e.options.wait_for_retry if kind == "wait_for" else e.options.execute_retry
    # the retry window opens when the phase's first attempt started, so a start delay or
    # a wait for locks before it does not use it up
    window_start = ref.started_at if e.attempt == 1 else e.first_attempt_at
    outcome = decide_retry(
        policy, attempt=e.attempt, first_attempt_at=window_start, now=now, error=error
    )
    if heartbeat_value is not None:
        e.last_heartbeat_value = heartbeat_value
    if outcome.retry:
        e.first_attempt_at = window_start
        e.attempt += 1
        e.last_failure = error
        e.not_before = now + outcome.delay_s
        schedule(tx, flow, e, now, eff)
        return
    failure = {
        "failure": {
            "errorType": error.error_type,
            "message": error.message,
            "attempt": e.attempt,
            "lastFailure": e.last_failure,
        }
    }
    append_history(
        tx,
        flow,
        hist.STEP_WAIT_FOR_FAILED if kind == "wait_for" else hist.STEP_EXECUTE_FAILED,
        hist.step_event(
            **_context(flow, e, ref, now), input={"stepInput": e.input}, output=failure
        ),
        now,
    )
    recovery = RecoveryErrorWire(detail=error.message, error_type=error.error_type)
    idx = specs.of_run(tx, flow)
    if kind == "wait_for" and e.options.wait_for_failure_proceed:
        e.phase, e.attempt, e.first_attempt_at = "execute", 1, now
        e.wait_for_failed, e.recovery_error, e.not_before = True, recovery, 0.0
        # a durable start of wait_for says nothing about execute's attempts
        e.started_attempt = 0
        schedule(tx, flow, e, now, eff)
        return
    route = e.options.execute_failure_step if kind == "execute" else None
    if route is not None and route in idx.step_types:
        tx.executions.delete(flow.run_id, e.execution_id)
        n = flow.counters.get(route, 0) + 1
        flow.counters = {**flow.counters, route: n}
        new = NewExecution(
            execution_id=f"{route}-{n}",
            step_type=route,
            from_execution_id=e.execution_id,
            input=None,
            options=e.options.execute_failure_options,
        )
        rec = new_exec(tx, limits, flow, idx, new, now, recovery_error=recovery)
        rec.input, rec.input_blob = e.input, e.input_blob
        schedule(tx, flow, rec, now, eff)
        check_graceful(tx, limits, flow, now, eff)
        return
    error_type = (
        INVALID_USER_FLOW_CODE if error.error_type in _INVALID_CODE_ERRORS else "WORKER_API_FAIL"
    )
    close_flow(
        tx,
        limits,
        flow,
        "failed",
        now,
        eff,
        error_type=error_type,
        error_message=(
            f"{error.error_type}: {error.message}"
            if error.error_type in _ENGINE_FAILURES
            else error.message
        ),
        error_detail=f"{e.execution_id} {kind} failed: {error.error_type}: {error.message}",
    )


def fail_step_attempt(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    ref: AttemptRef,
    error: ErrorInfo,
    now: float,
    heartbeat_value: msgspec.Raw | None = None,
) -> Effects:
    eff = Effects()
    loaded = _load(tx, ref)
    if loaded is None:
        return eff
    flow, e = loaded
    if flow.commit_hold is not None:
        raise _locks.CommitHeldError(flow.commit_hold)
    _release(tx, ref)
    fail_attempt(tx, limits, specs, flow, e, ref, error, now, eff, heartbeat_value)
    finish(tx, flow, eff)
    return eff


def mark_started(tx: Tx, ref: AttemptRef, heartbeat_value: msgspec.Raw | None) -> bool:
    """Durably record that ``ref``'s attempt started (no redelivery after this).

    Raises :class:`FencedError` when another server took the execution over.
    """
    loaded = _load(tx, ref)
    if loaded is None:
        return False
    _, e = loaded
    e.started_attempt = e.attempt
    if heartbeat_value is not None:
        e.last_heartbeat_value = heartbeat_value
    tx.executions.put(e)
    return True


def fire_timer(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    run_id: str,
    execution_id: str,
    fire_at: float,
    now: float,
) -> Effects:
    eff = Effects()
    flow = tx.flows.get(run_id)
    if flow is not None and flow.status == "running" and flow.commit_hold is not None:
        raise _locks.CommitHeldError(flow.commit_hold)
    # several servers may hold the same timer: only the job that deletes its row fires it
    if not tx.timers.take(run_id, execution_id, fire_at):
        return eff
    if flow is None or flow.status != "running":
        return eff
    target, wake_only = _children.timer_target(execution_id)
    e = tx.executions.get(run_id, target)
    if e is None:
        return eff
    if e.phase == "waiting":
        run_matching(tx, flow, now, eff, limits)
    elif e.not_before <= now and not wake_only:
        tx.timers.clear(run_id, execution_id)
        e.not_before = 0.0
        schedule(tx, flow, e, now, eff)
    finish(tx, flow, eff)
    return eff


def recover_claimed(
    tx: Tx, limits: Limits, specs: Specs, keys: list[tuple[str, str]], now: float
) -> Effects:
    """Apply the restart rule to executions this server just claimed from a lost owner.

    An attempt whose start was durably acknowledged fails (and follows its retry policy);
    any other is delivered again at the same attempt.
    """
    eff = Effects()
    by_run: dict[str, list[str]] = {}
    for run_id, eid in keys:
        by_run.setdefault(run_id, []).append(eid)
    for run_id, eids in by_run.items():
        flow = tx.flows.get(run_id)
        if flow is None or flow.status != "running":
            continue
        for eid in eids:
            e = tx.executions.get(run_id, eid)
            if e is None or e.phase == "waiting" or flow.status != "running":
                continue
            kind: Literal["wait_for", "execute"] = (
                "wait_for" if e.phase == "wait_for" else "execute"
            )
            if e.started_attempt and e.started_attempt == e.attempt:
                ref = AttemptRef(
                    run_id=flow.run_id,
                    execution_id=e.execution_id,
                    kind=kind,
                    attempt=e.attempt,
                    started_at=now,
                )
                err = ErrorInfo(
                    error_type="SERVER_RESTARTED",
                    message="the server dispatching a durably started attempt stopped",
                )
                fail_attempt(tx, limits, specs, flow, e, ref, err, now, eff)
            else:
                if 0 < e.not_before <= now:
                    # its retry timer is due: dispatch now and let the timer find nothing
                    tx.timers.clear(run_id, eid)
                    e.not_before = 0.0
                schedule(tx, flow, e, now, eff)
        check_graceful(tx, limits, flow, now, eff)
        finish(tx, flow, eff)
    return eff


def take_over(tx: Tx, limits: Limits, specs: Specs, now: float, lease_s: float) -> Effects:
    """Claim what dead servers were dispatching and recover it (see :func:`recover_claimed`)."""
    dead = tx.servers.dead(lease_s)
    if not dead:
        return Effects()
    keys = tx.claims.claim_from(dead)
    tx.rpc_calls.abandon(dead)
    _locks.abandon(tx, dead)
    tx.servers.remove(dead)
    return recover_claimed(tx, limits, specs, keys, now)


def claim_pool(
    tx: Tx, limits: Limits, specs: Specs, flow_type: str, now: float, limit: int
) -> Effects:
    """Claim up to ``limit`` pooled executions of ``flow_type`` for this server's Workers."""
    keys = tx.claims.claim_pool([flow_type], now, limit)
    return recover_claimed(tx, limits, specs, keys, now) if keys else Effects()


def fail_unserved(
    tx: Tx, limits: Limits, specs: Specs, now: float, default_s: float | None
) -> Effects:
    """Fail pooled attempts whose schedule-to-start deadline passed: no server took them.

    ``default_s``: the server's schedule-to-start default, for the error message of an
    attempt whose options set none.
    """
    eff = Effects()
    for run_id, eid in tx.claims.claim_unserved(now, 100):
        flow = tx.flows.get(run_id)
        e = tx.executions.get(run_id, eid)
        if flow is None or flow.status != "running" or e is None or e.phase == "waiting":
            continue
        kind: Literal["wait_for", "execute"] = "wait_for" if e.phase == "wait_for" else "execute"
        ref = AttemptRef(
            run_id=run_id, execution_id=eid, kind=kind, attempt=e.attempt, started_at=now
        )
        limit = e.options.schedule_to_start_timeout_s
        err = schedule_to_start_error(flow.flow_type, limit if limit is not None else default_s)
        fail_attempt(tx, limits, specs, flow, e, ref, err, now, eff)
        finish(tx, flow, eff)
    return eff


__all__ = [
    "AttemptRef",
    "FencedError",
    "ServiceError",
    "apply_step_result",
    "fail_step_attempt",
    "fire_timer",
    "claim_pool",
    "fail_unserved",
    "mark_started",
    "recover_claimed",
    "take_over",
]
