"""SubFlow children as their parents see them: closed or not, results, wake-ups.

Used by the shared transitions (matching, closing); the starting of children lives in
``_subflows`` (it needs the start job, which needs the transitions).
"""

from __future__ import annotations

from collections.abc import Iterable

from dex._protocol import FlowResultWire, SubFlowResultWire, WaitSpec

from dex_server.service._common import Effects
from dex_server.store import FlowRecord, Tx


def children(tx: Tx, waits: Iterable[WaitSpec]) -> dict[str, FlowRecord | None]:
    """The child runs the SubFlow conditions of ``waits`` wait for, by run id."""
    out: dict[str, FlowRecord | None] = {}
    for w in waits:
        for c in w.conditions:
            if c.kind == "subflow" and c.run_id and c.run_id not in out:
                out[c.run_id] = tx.flows.get(c.run_id)
    return out


def closed_runs(runs: dict[str, FlowRecord | None]) -> set[str]:
    """Run ids that ended; a child gone (retention deleted it) counts as ended."""
    return {rid for rid, rec in runs.items() if rec is None or rec.status != "running"}


def results(wait: WaitSpec, runs: dict[str, FlowRecord | None]) -> list[SubFlowResultWire]:
    """One result per SubFlow condition of ``wait``: the child's outcome, or ``running``."""
    out = []
    for c in wait.conditions:
        if c.kind != "subflow":
            continue
        rec = runs.get(c.run_id or "")
        if rec is None:
            result = FlowResultWire(
                status="terminated",
                error_type="INTERNAL",
                error_message=f"the child run {c.run_id} no longer exists",
            )
        else:
            result = FlowResultWire(
                status=rec.status,
                error_type=rec.error_type,
                error_message=rec.error_message,
                completions=list(rec.completions),
            )
        out.append(SubFlowResultWire(flow_id=c.flow_id or "", run_id=c.run_id or "", result=result))
    return out


# the Timer rows that wake a parent name its execution with this prefix: firing one only
# re-runs matching (a plain Timer row of an execution not waiting would queue it again)
_WAKE_PREFIX = "subflow-wake:"


def wake_waiters(tx: Tx, child: FlowRecord, now: float, eff: Effects) -> None:
    """Make every Step waiting for ``child`` look at its Wait again (``child`` just closed).

    A Timer row due now is the durable wake-up: whichever server fires it (a crash in
    between included) re-runs the parent's matching, which sees the child closed.
    """
    for run_id, execution_id in child.subflow_waiters:
        tx.timers.add(run_id, _WAKE_PREFIX + execution_id, now)
        eff.timers.append((now, run_id, _WAKE_PREFIX + execution_id))
    child.subflow_waiters = []


def timer_target(timer_execution_id: str) -> tuple[str, bool]:
    """The execution a Timer row is for, and whether the row only wakes its Wait."""
    if timer_execution_id.startswith(_WAKE_PREFIX):
        return timer_execution_id[len(_WAKE_PREFIX) :], True
    return timer_execution_id, False
