"""SubFlows: starting (or reusing) the child Flows of a Step's Wait, in the Wait's commit.

A ``wait_for`` result whose Wait holds SubFlow conditions starts each child in the same
transaction that parks the parent's Step execution, so a crash leaves either both or
neither. The child run records its parent's Flow ID (``FlowRecord.parent_flow_id``) and
the executions waiting for it (``FlowRecord.subflow_waiters``); its close wakes them. A
started child gets the parent's stored FlowConfig merged with the SubFlow's override, and
a ``DexParentFlowID`` search row. Closing the parent does not touch its children.
"""

from __future__ import annotations

import msgspec
from dex._protocol import (
    ErrorCode,
    ErrorInfo,
    StartFlowRequest,
    SubFlowStartSpec,
    TaskResult,
    WaitSpec,
)

from dex_server.engine import UndeclaredStateError, check_attribute_names
from dex_server.engine.config import InvalidConfigError, merge_config
from dex_server.engine.features import missing
from dex_server.engine.query import FieldType
from dex_server.engine.search import IndexRow
from dex_server.engine.subflows import (
    InvalidSubFlowError,
    check_subflows,
    child_flow_id,
    child_request_id,
    reuse_action,
    subflow_positions,
)
from dex_server.engine.waits import InvalidWaitError
from dex_server.engine.waits import check_wait as check_wait_shape
from dex_server.service import _steps
from dex_server.service._common import Effects, Limits, ServiceError, Specs
from dex_server.service._flows import resolve_spec, start_config, start_flow
from dex_server.store import ExecRecord, FlowRecord, Tx

_POLICY = {"restart": "allow_terminate_if_running", "start": "default"}


def apply_step_result(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    ref: _steps.AttemptRef,
    result: TaskResult,
    now: float,
) -> Effects:
    """``_steps.apply_step_result``, first starting the children a ``wait_for`` result asks.

    The result is checked whole before any child starts (a result the Step job would refuse
    starts nothing); a child that cannot start fails the attempt, not retried, with the
    reason's error code. Then the Wait goes on with each child's IDs in its conditions.
    """
    wait = result.wait
    if (
        ref.kind != "wait_for"
        or result.error is not None
        or wait is None
        or not subflow_positions(wait)
    ):
        return _steps.apply_step_result(tx, limits, specs, ref, result, now)
    loaded = _steps._load(tx, ref)
    if loaded is None or loaded[0].commit_hold is not None:
        # a stale attempt or a held run: the Step job says what happens (nothing starts)
        return _steps.apply_step_result(tx, limits, specs, ref, result, now)
    flow, e = loaded
    eff = Effects()
    try:
        check_wait_shape(wait)
        _steps.check_result_names(specs.of_run(tx, flow), result, f"{e.execution_id} wait_for")
        _steps.check_result_limits(tx, limits, flow, result)
        check_wait(tx, limits, specs, flow, e, wait)
    except ServiceError as exc:
        result = TaskResult(
            task_id=result.task_id,
            error=ErrorInfo(error_type=exc.code, message=str(exc), non_retryable=True),
        )
    except (UndeclaredStateError, InvalidWaitError):
        pass  # the Step job refuses the result with its own error
    else:
        wait = start_children(tx, limits, specs, flow, e, wait, now, eff)
        result = msgspec.structs.replace(result, wait=wait)
    eff.merge(_steps.apply_step_result(tx, limits, specs, ref, result, now))
    return eff


def check_wait(
    tx: Tx, limits: Limits, specs: Specs, flow: FlowRecord, e: ExecRecord, wait: WaitSpec
) -> None:
    """Refuse, before anything is written, a Wait whose children cannot start.

    Raises:
        ServiceError: a malformed SubFlow condition (``BAD_REQUEST``), a child start that
            needs a feature this server does not run (``FEATURE_NOT_AVAILABLE``), an
            unknown child Flow type, a child ID or value over its limit
            (``LIMIT_EXCEEDED``), an initial Attribute the child does not declare.

    """
    try:
        check_subflows(wait)
    except InvalidSubFlowError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc)) from None
    for k, pos in enumerate(subflow_positions(wait)):
        sub = wait.conditions[pos].subflow
        assert sub is not None
        lacking = missing(sub.requires)
        if lacking:
            raise ServiceError(
                ErrorCode.FEATURE_NOT_AVAILABLE,
                f"SubFlow {k} ({sub.flow_type}) needs what this server does not run: "
                + ", ".join(lacking),
            )
        limits.check_flow_id(child_flow_id(flow.flow_id, e.execution_id, k))
        limits.check_value(bytes(sub.input) if sub.input is not None else None, "SubFlow input")
        idx = resolve_spec(tx, specs, sub.flow_type, sub.spec)
        # the child's config and soft timeout, refused as its start would refuse them
        start_config(idx, _child_request(flow, e, k, sub, "start"))
        for a in sub.initial_attributes:
            limits.check_value(bytes(a.value), f"SubFlow initial Attribute {a.name!r}")
        try:
            check_attribute_names(
                idx.state_names, (a.name for a in sub.initial_attributes), "a SubFlow start"
            )
        except UndeclaredStateError as exc:
            raise ServiceError(ErrorCode.BAD_REQUEST, str(exc)) from None


def _child_request(
    flow: FlowRecord, e: ExecRecord, k: int, sub: SubFlowStartSpec, action: str
) -> StartFlowRequest:
    """The start of child ``k``: the parent's config with the SubFlow's override merged in.

    Raises:
        ServiceError: the override holds a value no Flow can have (``BAD_REQUEST``).

    """
    config = flow.config
    if sub.config is not None:
        try:
            config = merge_config(flow.config, sub.config)
        except InvalidConfigError as exc:
            raise ServiceError(ErrorCode.BAD_REQUEST, f"SubFlow {k}: {exc}") from None
    return StartFlowRequest(
        flow_type=sub.flow_type,
        flow_id=child_flow_id(flow.flow_id, e.execution_id, k),
        spec=sub.spec,
        input=sub.input,
        id_reuse_policy=_POLICY[action],  # type: ignore[arg-type]
        request_id=child_request_id(flow.run_id, e.execution_id, k),
        initial_attributes=sub.initial_attributes,
        start_delay_s=sub.start_delay_s,
        config=config,
        timeout=sub.timeout,
    )


def start_children(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    flow: FlowRecord,
    e: ExecRecord,
    wait: WaitSpec,
    now: float,
    eff: Effects,
) -> WaitSpec:
    """Start or attach every child of ``wait``; return it with each child's IDs filled in.

    The reuse policy applies when the child ID already has a run (the same Step execution
    waiting again, a reused parent Flow ID): see ``engine.subflows.reuse_action``.
    """
    positions = subflow_positions(wait)
    if not positions:
        return wait
    conditions = list(wait.conditions)
    for k, pos in enumerate(positions):
        c = conditions[pos]
        sub = c.subflow
        assert sub is not None
        child_id = child_flow_id(flow.flow_id, e.execution_id, k)
        request_id = child_request_id(flow.run_id, e.execution_id, k)
        prev = tx.flows.latest(child_id)
        action = reuse_action(
            sub.reuse_policy,
            prev.status if prev is not None else None,
            same_request=prev is not None and prev.request_id == request_id,
        )
        if action == "attach":
            assert prev is not None
            # read again under the row lock: the child may be closing on another server
            locked = tx.flows.get(prev.run_id)
            child = locked if locked is not None else prev
        else:
            run_id, started = start_flow(
                tx, limits, specs, _child_request(flow, e, k, sub, action), now
            )
            eff.merge(started)
            got = tx.flows.get(run_id)
            assert got is not None
            child = got
            child.parent_flow_id = flow.flow_id
            tx.search.put(
                child.run_id,
                "DexParentFlowID",
                FieldType.KEYWORD.value,
                [IndexRow(0, kw=flow.flow_id)],
            )
        if child.status == "running":
            waiter = (flow.run_id, e.execution_id)
            if waiter not in child.subflow_waiters:
                child.subflow_waiters.append(waiter)
        # the version stays: waiters and the parent link change nothing a task carries
        tx.flows.update(child)
        conditions[pos] = msgspec.structs.replace(
            c, subflow=None, flow_id=child_id, run_id=child.run_id
        )
    return msgspec.structs.replace(wait, conditions=conditions)
