"""Client operations on one Step execution: waiting for its completion, skipping a timer."""

from __future__ import annotations

from dex._protocol import ErrorCode

from dex_server.engine.ids import format_execution_id
from dex_server.engine.waits import TimerSelectionError, skip_timer
from dex_server.service._common import Effects, Limits, ServiceError
from dex_server.service._flowops import finish, run_matching
from dex_server.service._flows import require_flow
from dex_server.service._locks import CommitHeldError
from dex_server.store import ExecRecord, FlowRecord, Tx


def _check_number(step_type: str, number: int) -> None:
    if not step_type:
        raise ServiceError(ErrorCode.BAD_REQUEST, "a StepExecutionId needs a non-empty step_type")
    if number < 1:
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"a StepExecutionId number starts at 1, got {number}"
        )


def _execution(
    tx: Tx, flow_id: str, step_type: str, number: int
) -> tuple[FlowRecord, ExecRecord | None]:
    """The latest run and the live record of the execution (None once it ended).

    Raises ``STEP_EXECUTION_NOT_FOUND`` when the run never created that execution.
    """
    _check_number(step_type, number)
    flow = require_flow(tx, flow_id)
    eid = format_execution_id(step_type, number)
    if flow.counters.get(step_type, 0) < number:
        raise ServiceError(
            ErrorCode.STEP_EXECUTION_NOT_FOUND,
            f"Flow {flow_id!r} (run {flow.run_id}) has no Step execution {eid!r}",
            flow_id=flow_id,
        )
    return flow, tx.executions.get(flow.run_id, eid)


def step_done(tx: Tx, flow_id: str, step_type: str, number: int) -> tuple[str, bool]:
    """``(run_id, ended)`` of execution ``number`` of ``step_type`` in the latest run.

    An execution ends when its ``execute`` committed, failed for good, or was cancelled
    (a closed run has ended all of its executions).
    """
    flow, e = _execution(tx, flow_id, step_type, number)
    return flow.run_id, e is None


def skip_step_timer(
    tx: Tx,
    limits: Limits,
    flow_id: str,
    step_type: str,
    number: int,
    condition_id: str | None,
    condition_index: int | None,
    now: float,
) -> Effects:
    """Fire one pending timer of a waiting execution now, and wake it if its Wait is met."""
    if (condition_id is None) == (condition_index is None):
        raise ServiceError(
            ErrorCode.BAD_REQUEST, "a TimerId needs exactly one of condition_id, condition_index"
        )
    flow, e = _execution(tx, flow_id, step_type, number)
    eid = format_execution_id(step_type, number)
    if flow.status != "running":
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE, f"Flow {flow_id!r} is not running", flow_id=flow_id
        )
    if e is None or (e.phase == "execute" and e.condition_results is not None):
        # its Wait was met, or it ended: every timer it had is done
        raise ServiceError(
            ErrorCode.TIMER_NOT_PENDING,
            f"Step execution {eid!r} is no longer waiting: its timers are not pending",
            flow_id=flow_id,
        )
    if e.phase != "waiting" or e.wait is None:
        raise ServiceError(
            ErrorCode.TIMER_NOT_FOUND,
            f"Step execution {eid!r} is not parked on a Wait with timers",
            flow_id=flow_id,
        )
    try:
        e.wait = skip_timer(
            e.wait, condition_id=condition_id, condition_index=condition_index, now=now
        )
    except TimerSelectionError as exc:
        code = ErrorCode.TIMER_NOT_PENDING if exc.fired else ErrorCode.TIMER_NOT_FOUND
        raise ServiceError(code, f"Step execution {eid!r}: {exc}", flow_id=flow_id) from None
    if flow.commit_hold is not None:
        raise CommitHeldError(flow.commit_hold)
    tx.executions.put(e)
    eff = Effects()
    run_matching(tx, flow, now, eff, limits)
    finish(tx, flow, eff)
    return eff
