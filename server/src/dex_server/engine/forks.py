"""Time-travel planning: the state of a run as of a point in its history (pure).

A fork point is a *cut* between two events of the preserved run's history. The new run
starts from what the events before the cut built (a replay of their recorded effects and
decisions through the same planner the engine uses), then gets the later RPC effects
re-applied, unless the caller skips them. Step methods after the cut run again, except
single-attempt ``execute`` methods that committed (or durably started) in the preserved
run: their recorded outcome is taken instead, unless the caller asks for a rerun.

Consumption of Channel messages is dated at the consuming Step's ``execute`` commit: an
execution that was still waiting at the cut waits again, with its messages pending.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

import msgspec
from dex._protocol import (
    ConditionResultsWire,
    DecisionSpec,
    Movement,
    StepOptionsSpec,
    WaitSpec,
)

from dex_server.engine import history as hist
from dex_server.engine.decisions import (
    InvalidDecisionError,
    LiveExecution,
    plan_decision,
    plan_movements,
)

__all__ = [
    "FLOW_CONTINUED",
    "RECORDED_OUTCOME_TAKEN",
    "TIME_TRAVEL_FORK",
    "ForkExecution",
    "ForkPlan",
    "ForkPointError",
    "HistoryRow",
    "ReappliedRpc",
    "plan_fork",
]

TIME_TRAVEL_FORK = "TimeTravelFork"
"""First event of a run made by time travel."""
RECORDED_OUTCOME_TAKEN = "RecordedOutcomeTaken"
"""A single-attempt execute took its recorded outcome instead of running again."""
FLOW_CONTINUED = "FlowContinued"
"""First event of a run made by continue-as-new; ``continuedStart`` is the state carried."""

HistoryRow = tuple[int, float, str, bytes]  # (event_id, event_time, type, payload)
ForkKind = Literal["beginning", "history_event_time", "step_type", "step_execution_id"]
Method = Literal["wait_for", "execute"]

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder()
_T = TypeVar("_T")


def _as(value: Any, type_: type[_T]) -> _T:
    """Decode a decoded JSON value into a wire struct (its raw fields need the bytes)."""
    return msgspec.json.decode(_enc.encode(value), type=type_)


class ForkPointError(Exception):
    """The fork point names nothing in the run's history (or names it ambiguously)."""


@dataclass(kw_only=True)
class ForkExecution:
    """A Step execution live at the cut, and where the new run resumes it."""

    execution_id: str
    step_type: str
    from_execution_id: str
    input: bytes | None
    phase: Literal["start", "waiting", "execute"] = "start"
    wait: WaitSpec | None = None
    condition_results: ConditionResultsWire | None = None
    locals: dict[str, bytes] = field(default_factory=dict)
    options: StepOptionsSpec | None = None  # a movement's own options (None: the Step's)


@dataclass(kw_only=True)
class ReappliedRpc:
    """The recorded effects of one RPC after the cut."""

    event_id: int
    rpc_name: str
    attribute_writes: dict[str, bytes | None]
    publishes: list[tuple[str, bytes]]
    movements: list[Movement]


@dataclass(kw_only=True)
class ForkPlan:
    """Everything the service needs to create the new run.

    Attributes:
        cut_event_id: the first event of the preserved run *not* replayed.
        target: the execution the fork point names (``None`` for BEGINNING / a time).
        method: the method of ``target`` that runs again.
        attributes: Attribute values as of the cut (raw JSON, maybe a blob reference).
        channels: pending messages per Channel as of the cut, FIFO.
        executions: live executions as of the cut, in creation order.
        counters: per-Step-type counters as of the cut.
        completions: ``(step_type, execution_id, output)`` recorded before the cut.
        closing: a graceful completion was decided before the cut.
        reapplied: RPC effects after the cut, to apply on top (empty when skipped).
        recorded: single-attempt ``execute`` outcomes after the cut the new run takes,
            by execution id: the ``StepExecuteCompleted`` payload.
        rerun: single-attempt executions after the cut the caller asked to run again.

    """

    cut_event_id: int
    target: str | None
    method: Method | None
    attributes: dict[str, bytes] = field(default_factory=dict)
    channels: dict[str, list[bytes]] = field(default_factory=dict)
    executions: dict[str, ForkExecution] = field(default_factory=dict)
    counters: dict[str, int] = field(default_factory=dict)
    completions: list[tuple[str, str, bytes | None]] = field(default_factory=list)
    closing: bool = False
    reapplied: list[ReappliedRpc] = field(default_factory=list)
    recorded: dict[str, bytes] = field(default_factory=dict)
    rerun: list[str] = field(default_factory=list)


def _raw(v: Any) -> bytes | None:
    return None if v is None else _enc.encode(v)


def _exec_id(payload: dict[str, Any]) -> str:
    return str(payload.get("context", {}).get("stepExecutionId", ""))


_STEP_EVENTS = (
    hist.STEP_WAIT_FOR_COMPLETED,
    hist.STEP_WAIT_FOR_FAILED,
    hist.STEP_EXECUTE_COMPLETED,
    hist.STEP_EXECUTE_FAILED,
)


def _find_cut(
    rows: Sequence[tuple[int, float, str, dict[str, Any]]],
    kind: ForkKind,
    *,
    event_time: float | None,
    step_type: str | None,
    execution_id: str | None,
    method: Method | None,
) -> tuple[int, str | None, Method | None]:
    if kind == "beginning":
        return (rows[1][0] if len(rows) > 1 else rows[0][0] + 1), None, None
    if kind == "history_event_time":
        if event_time is None:
            raise ForkPointError("HISTORY_EVENT_TIME needs history_event_time")
        after = [r[0] for r in rows[1:] if r[1] > event_time]
        return (after[0] if after else rows[-1][0] + 1), None, None
    if kind == "step_type":
        if not step_type:
            raise ForkPointError("STEP_TYPE needs step_type")
        ids = [
            _exec_id(p)
            for _, _, t, p in rows
            if t in _STEP_EVENTS and p.get("context", {}).get("stepType") == step_type
        ]
        if not ids:
            raise ForkPointError(f"no execution of Step type {step_type!r} in the history")
        execution_id = max(ids, key=lambda i: int(i.rsplit("-", 1)[1]))
    if not execution_id:
        raise ForkPointError("STEP_EXECUTION_ID needs step_execution_id")
    mine = [(eid, t) for eid, _, t, p in rows if t in _STEP_EVENTS and _exec_id(p) == execution_id]
    if not mine:
        raise ForkPointError(f"no event of Step execution {execution_id!r} in the history")
    has_wait_for = any(
        t in (hist.STEP_WAIT_FOR_COMPLETED, hist.STEP_WAIT_FOR_FAILED) for _, t in mine
    )
    if method is None:
        method = "wait_for" if has_wait_for else "execute"
    if method == "wait_for" and has_wait_for:
        return mine[0][0], execution_id, method
    execs = [eid for eid, t in mine if t == hist.STEP_EXECUTE_COMPLETED]
    if not execs:
        raise ForkPointError(f"Step execution {execution_id!r} has no committed execute to fork at")
    return execs[-1], execution_id, "execute"


def plan_fork(
    rows: Sequence[HistoryRow],
    kind: ForkKind,
    *,
    step_types: frozenset[str] | set[str],
    single_attempt: Callable[[str], bool],
    event_time: float | None = None,
    step_type: str | None = None,
    execution_id: str | None = None,
    method: Method | None = None,
    skip_writes_reapply: bool = False,
    rerun_single_attempt: bool = False,
) -> ForkPlan:
    """Plan a fork of a run whose whole history is ``rows`` (oldest first).

    ``single_attempt(step_type)`` says whether that Step type's ``execute`` allows one
    attempt only (in the preserved run's spec).

    Raises:
        ForkPointError: the fork point is missing, or names nothing in ``rows``.

    """
    decoded = [(eid, t, typ, _dec.decode(p)) for eid, t, typ, p in rows]
    if not decoded or decoded[0][2] not in (hist.FLOW_STARTED, FLOW_CONTINUED):
        raise ForkPointError("the run's history does not begin with a start")
    cut, target, method = _find_cut(
        decoded,
        kind,
        event_time=event_time,
        step_type=step_type,
        execution_id=execution_id,
        method=method,
    )
    plan = ForkPlan(cut_event_id=cut, target=target, method=method)
    for eid, _, typ, p in decoded:
        if eid >= cut:
            break
        _replay(plan, typ, p, step_types)
    if target is not None and method == "execute":
        # the fork keeps the target's WaitFor result: its execute runs with the same inputs
        ev = next(p for eid, _, t, p in decoded if eid == cut)
        x = plan.executions.get(target)
        if x is None:
            raise ForkPointError(f"Step execution {target!r} is not live at the fork point")
        cr = ev.get("input", {}).get("conditionResults")
        x.phase = "execute"
        x.wait = None
        x.condition_results = _as(cr, ConditionResultsWire) if cr else None
        _consume(plan, x.condition_results)
    elif target is not None and target not in plan.executions:
        raise ForkPointError(f"Step execution {target!r} is not live at the fork point")
    for eid, _, typ, p in decoded:
        if eid < cut:
            continue
        if typ == hist.RPC_EXECUTION_COMPLETED and not skip_writes_reapply:
            plan.reapplied.append(_rpc_effects(eid, p))
        if typ == hist.STEP_EXECUTE_COMPLETED:
            st = str(p.get("context", {}).get("stepType", ""))
            if single_attempt(st):
                if rerun_single_attempt:
                    plan.rerun.append(_exec_id(p))
                else:
                    plan.recorded[_exec_id(p)] = _enc.encode({"stepType": st, "event": p})
    return plan


def _consume(plan: ForkPlan, cr: ConditionResultsWire | None) -> None:
    if cr is None:
        return
    for name, values in zip(cr.channel_names, cr.channel_values, strict=False):
        q = plan.channels.get(name, [])
        del q[: len(values)]


def _apply_writes(plan: ForkPlan, out: dict[str, Any]) -> None:
    for name, v in (out.get("attributeWrites") or {}).items():
        if v is None:
            plan.attributes.pop(name, None)
        else:
            plan.attributes[name] = _enc.encode(v)
    for pub in out.get("publishes") or []:
        plan.channels.setdefault(pub["channel"], []).append(_enc.encode(pub.get("value")))


def _rpc_effects(event_id: int, p: dict[str, Any]) -> ReappliedRpc:
    out = p.get("output", {})
    return ReappliedRpc(
        event_id=event_id,
        rpc_name=str(p.get("rpcName", "")),
        attribute_writes={k: _raw(v) for k, v in (out.get("attributeWrites") or {}).items()},
        publishes=[(x["channel"], _enc.encode(x.get("value"))) for x in out.get("publishes") or []],
        movements=[
            Movement(step_type=m["stepType"], input=_as_raw(m.get("input")))
            for m in out.get("movements") or []
        ],
    )


def _as_raw(v: Any) -> msgspec.Raw | None:
    return None if v is None else msgspec.Raw(_enc.encode(v))


def _continued(plan: ForkPlan, p: dict[str, Any]) -> None:
    """The state a continue-as-new carried: the new start of a history."""
    cs = p.get("continuedStart", {})
    plan.attributes = {k: _enc.encode(v) for k, v in (cs.get("attributes") or {}).items()}
    plan.channels = {}
    for m in cs.get("pendingChannelMessages") or []:
        plan.channels.setdefault(m["channel"], []).append(_enc.encode(m.get("value")))
    plan.executions = {}
    for x in cs.get("stepsToResume") or []:
        eid = str(x["stepExecutionId"])
        plan.executions[eid] = ForkExecution(
            execution_id=eid,
            step_type=str(x["stepType"]),
            from_execution_id=str(x.get("fromStepExecutionId", "")),
            input=_raw(x.get("input")),
            phase="waiting",
            wait=_as(x["wait"], WaitSpec) if x.get("wait") else None,
            locals={k: _enc.encode(v) for k, v in (x.get("locals") or {}).items()},
            options=_as(x["options"], StepOptionsSpec) if x.get("options") else None,
        )
    plan.counters = {str(k): int(v) for k, v in (cs.get("counters") or {}).items()}
    plan.completions = [
        (str(c["stepType"]), str(c["stepExecutionId"]), _raw(c.get("output")))
        for c in cs.get("completedSteps") or []
    ]
    plan.closing = bool(cs.get("closing"))


def _replay(
    plan: ForkPlan, typ: str, p: dict[str, Any], step_types: frozenset[str] | set[str]
) -> None:
    if typ == FLOW_CONTINUED:
        _continued(plan, p)
        return
    if typ == hist.FLOW_STARTED:
        for name, v in (p.get("initialAttributes") or {}).items():
            plan.attributes[name] = _enc.encode(v)
        start = p.get("startStepType")
        if start:
            plan.counters = {start: 1}
            plan.executions[f"{start}-1"] = ForkExecution(
                execution_id=f"{start}-1",
                step_type=start,
                from_execution_id="__start__",
                input=_raw(p.get("input")),
            )
        return
    if typ == hist.RPC_EXECUTION_COMPLETED:
        r = _rpc_effects(0, p)
        _apply_writes(plan, p.get("output", {}))
        _add_movements(plan, r.movements, f"__rpc/{r.rpc_name}", step_types)
        return
    x = plan.executions.get(_exec_id(p))
    out = p.get("output", {})
    if typ == hist.STEP_WAIT_FOR_COMPLETED and x is not None:
        _apply_writes(plan, out)
        x.locals.update({k: _enc.encode(v) for k, v in (out.get("locals") or {}).items()})
        wait = _as(out["wait"], WaitSpec) if out.get("wait") else WaitSpec()
        if wait.mode == "skip" or not wait.conditions:
            x.phase = "execute"
        else:
            x.phase, x.wait = "waiting", wait
    elif typ == hist.STEP_EXECUTE_COMPLETED and x is not None:
        _apply_writes(plan, out)
        cr = p.get("input", {}).get("conditionResults")
        _consume(plan, _as(cr, ConditionResultsWire) if cr else None)
        decision = _as(out["decision"], DecisionSpec)
        del plan.executions[x.execution_id]
        me = LiveExecution(
            execution_id=x.execution_id,
            step_type=x.step_type,
            from_execution_id=x.from_execution_id,
        )
        live = [
            LiveExecution(
                execution_id=e.execution_id,
                step_type=e.step_type,
                from_execution_id=e.from_execution_id,
            )
            for e in plan.executions.values()
        ]
        try:
            dp = plan_decision(
                decision, current=me, live=live, step_types=step_types, counters=plan.counters
            )
        except InvalidDecisionError as exc:
            raise ForkPointError(f"the history cannot be replayed: {exc}") from None
        for c in dp.cancel:
            plan.executions.pop(c, None)
        plan.counters = dp.counters
        for n in dp.new:
            plan.executions[n.execution_id] = ForkExecution(
                execution_id=n.execution_id,
                step_type=n.step_type,
                from_execution_id=n.from_execution_id,
                input=n.input,
                options=n.options,
            )
        if decision.kind in ("graceful_complete", "force_complete") and dp.completion_output:
            plan.completions.append((x.step_type, x.execution_id, dp.completion_output))
        if dp.graceful:
            plan.closing = True


def _add_movements(
    plan: ForkPlan, movements: list[Movement], origin: str, step_types: frozenset[str] | set[str]
) -> None:
    try:
        new, plan.counters = plan_movements(
            movements, from_execution_id=origin, step_types=step_types, counters=plan.counters
        )
    except InvalidDecisionError as exc:
        raise ForkPointError(f"the history cannot be replayed: {exc}") from None
    for n in new:
        plan.executions[n.execution_id] = ForkExecution(
            execution_id=n.execution_id,
            step_type=n.step_type,
            from_execution_id=n.from_execution_id,
            input=n.input,
            options=n.options,
        )
