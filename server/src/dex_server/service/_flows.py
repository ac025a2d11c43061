"""Jobs of the client API: start, stop, RPC snapshot and commit, reads, retention."""

from __future__ import annotations

from typing import Any

import msgspec
from dex._protocol import (
    ActiveStepWire,
    AttributeValuesWire,
    ErrorCode,
    FlowConfigWire,
    FlowInfoWire,
    FlowResultWire,
    FlowSpec,
    FlowStateWire,
    FlowTimeoutSpec,
    HistoryEventWire,
    HistoryPage,
    InvokeRpcRequest,
    Movement,
    ReadAttributesRequest,
    StartFlowRequest,
    StepOptionsSpec,
    StopFlowRequest,
    Task,
    TaskResult,
)

from dex_server.engine import (
    InvalidDecisionError,
    InvalidSpecError,
    LiveExecution,
    NewExecution,
    UndeclaredStateError,
    check_attribute_names,
    check_spec,
    plan_movements,
    plan_step_cancellation,
)
from dex_server.engine import history as hist
from dex_server.engine.config import InvalidConfigError, merge_config
from dex_server.engine.flow_timeout import (
    TIMEOUT_EXECUTION_ID,
    TIMEOUT_HANDLER_STEP,
    InvalidTimeoutError,
    check_timeout,
    resolve_policy,
    timeout_wait,
)
from dex_server.engine.ids import new_uuid7
from dex_server.service import _locks
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
    cancel_execs,
    check_graceful,
    close_flow,
    finish,
    new_exec,
    run_matching,
    schedule,
)
from dex_server.service._steps import (
    apply_effects,
    check_result_limits,
    check_result_names,
    raw_bytes,
    write_index,
)
from dex_server.service._tasks import build_rpc_task
from dex_server.store import ExecRecord, FlowRecord, StoredValue, Tx

_STOP_STATUS = {"cancel": "canceled", "terminate": "terminated", "fail": "failed"}


def _is_empty(spec: FlowSpec) -> bool:
    return not (spec.steps or spec.rpcs or spec.state or spec.start_step)


def resolve_spec(tx: Tx, specs: Specs, flow_type: str, spec: FlowSpec) -> SpecIndex:
    """The spec version a start runs with: the request's, or the type's current one.

    Installs nothing: a new version enters the store and the index only with a start
    that commits (see :func:`start_flow`).
    """
    if spec.flow_type != flow_type:
        raise ServiceError(
            ErrorCode.UNKNOWN_FLOW_TYPE,
            f"the request's spec defines Flow type {spec.flow_type!r}, not {flow_type!r}",
        )
    if _is_empty(spec):
        idx = specs.current(tx, flow_type)
        if idx is None:
            raise ServiceError(ErrorCode.UNKNOWN_FLOW_TYPE, f"unknown Flow type {flow_type!r}")
        return idx
    try:
        check_spec(spec)
    except InvalidSpecError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc)) from None
    return specs.index(spec)


# another server may start the same Flow ID between our look and our insert: look again
_START_CONFLICT_RETRIES = 5


def start_flow(
    tx: Tx, limits: Limits, specs: Specs, req: StartFlowRequest, now: float
) -> tuple[str, Effects]:
    """Start a run; returns its run id (or the existing one for an idempotent retry).

    The run records the spec version it starts with; a request carrying a spec stores
    that version and makes it the type's current one, but only if the start commits (a
    refused start leaves no spec behind, in the store or in memory). One running run per
    Flow ID holds on every server: the store refuses a second one, and the ID-reuse
    policy is applied again to the run that won.
    """
    eff = Effects()
    limits.check_flow_id(req.flow_id)
    limits.check_value(raw(req.input), "Flow input")
    for a in req.initial_attributes:
        limits.check_value(bytes(a.value), f"initial Attribute {a.name!r}")
    idx = resolve_spec(tx, specs, req.flow_type, req.spec)
    try:
        check_attribute_names(
            idx.state_names, (a.name for a in req.initial_attributes), "the start"
        )
    except UndeclaredStateError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc), flow_id=req.flow_id) from None
    flow = FlowRecord(
        run_id=new_uuid7(),
        flow_id=req.flow_id,
        flow_type=req.flow_type,
        started_at=now,
        request_id=req.request_id,
        input=req.input,
        spec_version=idx.version,
    )
    flow.config = start_config(idx, req)
    for _ in range(_START_CONFLICT_RETRIES):
        prev = tx.flows.latest(req.flow_id)
        if prev is not None:
            if req.request_id and prev.request_id == req.request_id:
                return prev.run_id, eff
            _apply_reuse_policy(tx, limits, req, prev, now, eff)
        if tx.flows.insert(flow):
            break
    else:
        raise ServiceError(
            ErrorCode.FLOW_ALREADY_STARTED,
            f"Flow {req.flow_id!r} kept getting new runs started concurrently",
            flow_id=req.flow_id,
        )
    if not _is_empty(req.spec):
        if specs.known(req.flow_type, idx.version) is None:
            tx.signals.notify("spec", "")  # other servers load the new version
        tx.specs.put(idx.version, req.spec, now)
        eff.specs.append(idx)
    initial: dict[str, msgspec.Raw] = {}
    for a in req.initial_attributes:
        stored = store_value(tx, limits, flow.run_id, bytes(a.value))
        flow.state_bytes += tx.state.write(flow.run_id, a.name, stored)
        write_index(tx, idx.indexes, flow.run_id, a.name, raw_bytes(a.value))
        initial[a.name] = history_value(stored) or a.value
    if flow.state_bytes > limits.max_flow_state_bytes:
        raise LimitError(
            "max_flow_state_bytes",
            flow.state_bytes,
            limits.max_flow_state_bytes,
            "initial Flow state",
        )
    append_history(
        tx,
        flow,
        hist.FLOW_STARTED,
        hist.flow_started(
            flow_type=flow.flow_type,
            start_step_type=idx.spec.start_step,
            input=req.input,
            initial_attributes=initial,
            request_id=req.request_id,
        ),
        now,
    )
    start = idx.spec.start_step
    if start is not None:
        flow.counters = {start: 1}
        e = new_exec(
            tx,
            limits,
            flow,
            idx,
            NewExecution(
                execution_id=f"{start}-1",
                step_type=start,
                from_execution_id="__start__",
                input=bytes(req.input) if req.input is not None else None,
                options=None,
            ),
            now,
        )
        if req.start_delay_s:
            e.not_before = now + req.start_delay_s
        schedule(tx, flow, e, now, eff)
    if req.timeout is not None:
        arm_timeout(tx, flow, idx, req.timeout, now, eff)
    finish(tx, flow, eff)
    return flow.run_id, eff


def start_config(idx: SpecIndex, req: StartFlowRequest) -> FlowConfigWire | None:
    """Check the start's FlowConfig and soft timeout; return the config to keep."""
    if req.timeout is not None:
        _check_timeout(idx, req, req.timeout)
    if req.config is None:
        return None
    try:
        return merge_config(None, req.config)
    except InvalidConfigError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc), flow_id=req.flow_id) from None


def _check_timeout(idx: SpecIndex, req: StartFlowRequest, timeout: FlowTimeoutSpec) -> None:
    try:
        check_timeout(timeout)
        resolve_policy(timeout.policy, has_handler=idx.spec.has_timeout_handler)
    except InvalidTimeoutError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc), flow_id=req.flow_id) from None
    route = timeout.handler.execute_failure_step if timeout.handler else None
    if route is not None and route not in idx.step_types:
        raise ServiceError(
            ErrorCode.BAD_REQUEST,
            f"the timeout handler's failure route {route!r} is not a Step of {req.flow_type!r}",
            flow_id=req.flow_id,
        )


def arm_timeout(
    tx: Tx,
    flow: FlowRecord,
    idx: SpecIndex,
    spec: FlowTimeoutSpec,
    now: float,
    eff: Effects,
    *,
    deadline: float | None = None,
) -> None:
    """Create the run's ``sys:timeout_handler-1`` execution, waiting on the deadline timer.

    The deadline is ``now + spec.timeout_s`` unless given (a fork keeps the old run's).
    """
    policy = resolve_policy(spec.policy, has_handler=idx.spec.has_timeout_handler)
    if deadline is None:
        deadline = now + spec.timeout_s
    flow.timeout = FlowTimeoutSpec(timeout_s=spec.timeout_s, policy=policy, handler=spec.handler)
    flow.timeout_at = deadline
    flow.counters = {**flow.counters, TIMEOUT_HANDLER_STEP: 1}
    flow.wait_seq += 1
    e = ExecRecord(
        run_id=flow.run_id,
        execution_id=TIMEOUT_EXECUTION_ID,
        step_type=TIMEOUT_HANDLER_STEP,
        from_execution_id="__start__",
        phase="waiting",
        options=spec.handler if spec.handler is not None else StepOptionsSpec(),
        first_attempt_at=now,
        wait=timeout_wait(deadline),
        wait_seq=flow.wait_seq,
    )
    tx.executions.put(e)
    tx.timers.add(flow.run_id, e.execution_id, deadline)
    eff.timers.append((deadline, flow.run_id, e.execution_id))


def _apply_reuse_policy(
    tx: Tx, limits: Limits, req: StartFlowRequest, prev: FlowRecord, now: float, eff: Effects
) -> None:
    """Refuse the start, or terminate the running ``prev``, per the ID-reuse policy."""
    running = prev.status == "running"
    policy = req.id_reuse_policy
    if running and policy == "allow_terminate_if_running":
        close_flow(
            tx,
            limits,
            prev,
            "terminated",
            now,
            eff,
            error_message="terminated by a new run (allow_terminate_if_running)",
        )
        finish(tx, prev, eff)
    elif (
        running
        or policy == "disallow"
        or (policy == "allow_if_previous_failed" and prev.status == "completed")
    ):
        raise ServiceError(
            ErrorCode.FLOW_ALREADY_STARTED,
            f"Flow {req.flow_id!r} already has a {prev.status} run {prev.run_id}"
            f" (id_reuse_policy={policy})",
            flow_id=req.flow_id,
        )


def raw(v: msgspec.Raw | None) -> bytes | None:
    return bytes(v) if v is not None else None


def require_flow(tx: Tx, flow_id: str, run_id: str = "") -> FlowRecord:
    flow = tx.flows.get(run_id) if run_id else tx.flows.latest(flow_id)
    if flow is None or flow.flow_id != flow_id:
        raise ServiceError(ErrorCode.FLOW_NOT_FOUND, f"Flow {flow_id!r} not found", flow_id=flow_id)
    return flow


def stop_flow(tx: Tx, limits: Limits, flow_id: str, req: StopFlowRequest, now: float) -> Effects:
    eff = Effects()
    flow = tx.flows.latest(flow_id)
    if flow is None or flow.status != "running":
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE, f"Flow {flow_id!r} is not running", flow_id=flow_id
        )
    error_type = "CLIENT_API_FAILING_FLOW" if req.type == "fail" else None
    close_flow(
        tx,
        limits,
        flow,
        _STOP_STATUS[req.type],
        now,
        eff,
        error_type=error_type,
        # a terminated run reports no error message; its reason stays in the history
        error_message=None if req.type == "terminate" else req.reason,
        error_detail=req.reason,
    )
    finish(tx, flow, eff)
    return eff


def info(flow: FlowRecord) -> FlowInfoWire:
    return FlowInfoWire(
        flow_id=flow.flow_id,
        run_id=flow.run_id,
        flow_type=flow.flow_type,
        status=flow.status,
        started_at=flow.started_at,
        closed_at=flow.closed_at,
        config=flow.config,
        timeout_at=flow.timeout_at,
    )


def update_config(tx: Tx, flow_id: str, update: FlowConfigWire, now: float) -> Effects:
    """Merge ``update`` into the running Flow's FlowConfig (fields left None keep theirs).

    The merge is recorded as a ``FlowConfigUpdated`` history event. Step methods that
    start after it use the new ``step_durability``.
    """
    eff = Effects()
    flow = tx.flows.latest(flow_id)
    if flow is None or flow.status != "running":
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE, f"Flow {flow_id!r} is not running", flow_id=flow_id
        )
    try:
        flow.config = merge_config(flow.config, update)
    except InvalidConfigError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc), flow_id=flow_id) from None
    append_history(
        tx,
        flow,
        hist.FLOW_CONFIG_UPDATED,
        hist.flow_config_updated(update=update, config=flow.config),
        now,
    )
    finish(tx, flow, eff)
    return eff


def describe(tx: Tx, flow_id: str) -> FlowInfoWire:
    return info(require_flow(tx, flow_id))


def result_of(tx: Tx, flow_id: str) -> FlowResultWire:
    flow = require_flow(tx, flow_id)
    return FlowResultWire(
        status=flow.status,
        error_type=flow.error_type,
        error_message=flow.error_message,
        completions=list(flow.completions),
    )


def state_of(tx: Tx, flow_id: str, running: dict[tuple[str, str], str]) -> FlowStateWire:
    flow = require_flow(tx, flow_id)
    active = []
    for e in sorted(tx.executions.of_run(flow.run_id), key=lambda x: x.execution_id):
        phase = {"wait_for": "queued_wait_for", "execute": "queued_execute"}.get(e.phase, e.phase)
        if (flow.run_id, e.execution_id) in running:
            phase = phase.replace("queued_", "running_")
        active.append(
            ActiveStepWire(
                step_execution_id=e.execution_id,
                step_type=e.step_type,
                from_step_execution_id=e.from_execution_id,
                phase=phase,
                attempt=e.attempt,
                last_failure=e.last_failure,
            )
        )
    return FlowStateWire(
        info=info(flow),
        active_steps=active,
        channel_sizes=tx.channels.sizes(flow.run_id),
        attribute_names=tx.state.names(flow.run_id),
    )


def read_attributes(
    tx: Tx, specs: Specs, flow_id: str, req: ReadAttributesRequest
) -> AttributeValuesWire:
    """Committed Attribute values and Channel sizes of a run: a read needing no Worker.

    Raises:
        ServiceError: FLOW_NOT_FOUND; BAD_REQUEST for a map the Flow type does not declare
            as an AttributeMap, a range bound outside its map, or a ``limit`` below 1.

    """
    flow = require_flow(tx, flow_id, req.run_id)
    idx = specs.get(flow.flow_type)
    declared = (
        {d.name for d in idx.spec.state if d.kind == "attribute_map"} if idx is not None else set()
    )
    for m in [*req.maps, *(r.map for r in req.ranges)]:
        if m not in declared:
            raise ServiceError(
                ErrorCode.BAD_REQUEST,
                f"Flow type {flow.flow_type!r} declares no AttributeMap {m!r}",
                flow_id=flow_id,
            )
    for r in req.ranges:
        prefix = r.map + "/"
        if any(b is not None and not b.startswith(prefix) for b in (r.start, r.end)):
            raise ServiceError(
                ErrorCode.BAD_REQUEST, f"a range bound outside AttributeMap {r.map!r}"
            )
        if r.limit is not None and r.limit < 1:
            raise ServiceError(ErrorCode.BAD_REQUEST, "a range limit must be at least 1")
    found: dict[str, StoredValue] = {}
    if req.names:
        found.update(tx.state.of_names(flow.run_id, req.names))
    if req.maps:
        found.update(tx.state.of_maps(flow.run_id, req.maps))
    for r in req.ranges:
        found.update(tx.state.of_range(flow.run_id, r.map, r.start, r.end, r.limit))
    values: dict[str, msgspec.Raw] = {}
    for name in sorted(found):
        v = found[name]
        data = tx.blobs.get(v.blob) if v.blob is not None else v.value
        if data is not None:
            values[name] = msgspec.Raw(bytes(data))
    return AttributeValuesWire(
        info=info(flow), values=values, channel_sizes=tx.channels.sizes(flow.run_id)
    )


def history_page(tx: Tx, flow_id: str, run_id: str, page_size: int, token: str) -> HistoryPage:
    flow = require_flow(tx, flow_id, run_id)
    try:
        after = int(token) if token else 0
    except ValueError:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"bad page_token {token!r}") from None
    rows = tx.history.page(flow.run_id, after, page_size + 1)
    events = [
        HistoryEventWire(event_id=i, event_time=t, type=ty, payload=msgspec.Raw(p))
        for i, t, ty, p in rows[:page_size]
    ]
    nxt = str(events[-1].event_id) if len(rows) > page_size and events else None
    return HistoryPage(flow_id=flow_id, run_id=flow.run_id, events=events, next_page_token=nxt)


def rpc_snapshot(
    tx: Tx, specs: Specs, flow_id: str, req: InvokeRpcRequest, *, build: bool = True
) -> tuple[FlowRecord, Task | None, bool, list[str], float]:
    """Return (flow, task, transactional, locks, timeout) for an RPC call.

    A transactional RPC's task stands only if no Step result commits between the snapshot
    and the call: a caller that does not hold the run's commits yet uses it only after
    checking that nothing else reached the store meanwhile (see ``Runtime._invoke_rpc``).
    ``build=False`` leaves it out (``None``) for a caller that will take the snapshot
    again anyway.
    """
    flow = tx.flows.get(req.run_id) if req.run_id else tx.flows.latest(flow_id)
    if flow is None or flow.flow_id != flow_id:
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE, f"Flow {flow_id!r} not found", flow_id=flow_id
        )
    idx = specs.of_run(tx, flow)
    rpc = idx.rpcs.get(req.rpc_name)
    if rpc is None:
        raise ServiceError(
            ErrorCode.UNKNOWN_RPC,
            f"Flow type {flow.flow_type!r} has no RPC {req.rpc_name!r}",
            flow_id=flow_id,
        )
    locks = [*rpc.locks, *req.extra_locks]
    transactional = rpc.is_transactional or bool(locks)
    if transactional and flow.status != "running":
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE, f"Flow {flow_id!r} is not running", flow_id=flow_id
        )
    task = (
        build_rpc_task(tx, flow, idx, req.rpc_name, raw(req.input), req.extra_loads)
        if build or not transactional
        else None
    )
    timeout = min(rpc.timeout_s, req.timeout_s or rpc.timeout_s, 60.0)
    return flow, task, transactional, locks, timeout


# a client's idempotency key for one RPC invocation (a UUID is 36 bytes)
MAX_RPC_REQUEST_ID_BYTES = 256


class RpcAlreadyDoneError(Exception):
    """An invocation with the same ``request_id`` already committed; ``output`` is its own."""

    def __init__(self, output: bytes | None) -> None:
        super().__init__("the RPC invocation was already committed")
        self.output = output


def check_rpc_request_id(request_id: str) -> None:
    """Refuse a ``request_id`` over ``MAX_RPC_REQUEST_ID_BYTES`` or holding a NUL character.

    Raises:
        ServiceError: BAD_REQUEST.

    """
    size = len(request_id.encode())
    if size > MAX_RPC_REQUEST_ID_BYTES:
        raise ServiceError(
            ErrorCode.BAD_REQUEST,
            f"request_id is {size} bytes, over the limit of {MAX_RPC_REQUEST_ID_BYTES}",
        )
    if "\x00" in request_id:
        raise ServiceError(ErrorCode.BAD_REQUEST, "request_id must not hold a NUL character")


def rpc_recorded(tx: Tx, flow_id: str, req: InvokeRpcRequest) -> tuple[bytes | None] | None:
    """``(output,)`` of the invocation of ``req.request_id`` the run recorded, if any."""
    flow = tx.flows.get(req.run_id) if req.run_id else tx.flows.latest(flow_id)
    if flow is None or flow.flow_id != flow_id:
        return None
    return tx.rpc_requests.get(flow.run_id, req.request_id)


def record_rpc(
    tx: Tx, run_id: str, request_id: str, output: bytes | None, now: float
) -> bytes | None:
    """Record the output of an RPC without effects; return the run's recorded output.

    The first invocation of a ``request_id`` wins: a concurrent duplicate gets its output.
    """
    if tx.flows.get(run_id) is None:  # swept meanwhile: nothing to record it for
        return output
    if tx.rpc_requests.add(run_id, request_id, output, now):
        return output
    found = tx.rpc_requests.get(run_id, request_id)
    return found[0] if found is not None else output


def rpc_output_bytes(result: TaskResult) -> bytes | None:
    """The RPC's output as recorded: its JSON, ``None`` for none (or ``null``)."""
    if result.rpc_output is None:
        return None
    data = bytes(result.rpc_output)
    return None if data == b"null" else data


def has_effects(r: TaskResult) -> bool:
    return bool(
        r.attribute_writes
        or r.publishes
        or r.channel_deletes
        or r.rpc_movements
        or r.rpc_cancel_steps
    )


def _continued(tx: Tx, flow: FlowRecord | None, *, pinned: bool) -> FlowRecord | None:
    """The run ``flow`` went on in by continue-as-new (itself if it did not, or ``pinned``)."""
    while flow is not None and flow.continued_to and not pinned:
        flow = tx.flows.get(flow.continued_to)
    return flow


def rpc_commit(
    tx: Tx,
    limits: Limits,
    specs: Specs,
    run_id: str,
    req: InvokeRpcRequest,
    result: TaskResult,
    transactional: bool,
    now: float,
    *,
    holder: str | None = None,
) -> Effects:
    """Commit an RPC's effects; ``holder`` is the commit hold of a transactional RPC.

    With a ``req.request_id`` the commit also records the invocation's output, so that a
    retry returns it; a duplicate that reaches this point second applies nothing.

    Raises:
        CommitHeldError: another transactional RPC holds the run (commit after it).
        RpcAlreadyDoneError: an invocation with the same ``request_id`` committed first.

    """
    eff = Effects()
    flow = _continued(tx, tx.flows.get(run_id), pinned=bool(req.run_id))
    run_id = flow.run_id if flow is not None else run_id
    if req.request_id and flow is not None:
        found = tx.rpc_requests.get(run_id, req.request_id)
        if found is not None:
            raise RpcAlreadyDoneError(found[0])
    if flow is None or flow.status != "running":
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE, "the Flow is not running; the RPC's effects were not applied"
        )
    if flow.commit_hold is not None and flow.commit_hold != holder:
        raise _locks.CommitHeldError(flow.commit_hold)
    idx = specs.of_run(tx, flow)
    try:
        check_result_names(idx, result, f"RPC {req.rpc_name!r}")
    except UndeclaredStateError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc)) from None
    old_sizes = check_result_limits(tx, limits, flow, result)
    if transactional:
        for d in result.channel_deletes:
            if d.message_id not in tx.channels.pending_ids(run_id, [d.channel]).get(d.channel, []):
                raise ServiceError(
                    ErrorCode.CHANNEL_MESSAGE_NOT_FOUND,
                    f"message {d.message_id!r} is not pending in Channel {d.channel!r}",
                )
    try:
        new, counters = plan_movements(
            result.rpc_movements,
            from_execution_id=f"__rpc/{req.rpc_name}",
            step_types=idx.step_types,
            counters=flow.counters,
        )
        for name in result.rpc_cancel_steps:
            if name not in idx.step_types:
                raise InvalidDecisionError(f"unknown Step type {name!r} to cancel")
    except InvalidDecisionError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, str(exc)) from None
    published = apply_effects(tx, limits, flow, result, now, idx.indexes, old_sizes)
    live = [
        LiveExecution(
            execution_id=e.execution_id,
            step_type=e.step_type,
            from_execution_id=e.from_execution_id,
        )
        for e in tx.executions.of_run(run_id)
    ]
    cancel_execs(
        tx,
        flow,
        plan_step_cancellation(live=live, current_id=None, cancel_steps=result.rpc_cancel_steps),
        eff,
    )
    flow.counters = counters
    for n in new:
        schedule(tx, flow, new_exec(tx, limits, flow, idx, n, now), now, eff)
    output: dict[str, Any] = {
        "output": result.rpc_output,
        "attributeWrites": dict(result.attribute_writes),
        "publishes": [{"channel": p.channel, "value": p.value} for p in result.publishes],
        "movements": [_movement(m) for m in result.rpc_movements],
        "cancelSteps": list(result.rpc_cancel_steps),
    }
    append_history(
        tx,
        flow,
        hist.RPC_EXECUTION_COMPLETED,
        hist.rpc_completed(rpc_name=req.rpc_name, input=req.input, output=output),
        now,
    )
    if req.request_id:
        tx.rpc_requests.add(run_id, req.request_id, rpc_output_bytes(result), now)
    if published:
        run_matching(tx, flow, now, eff, limits)
    check_graceful(tx, limits, flow, now, eff)
    finish(tx, flow, eff)
    return eff


def _movement(m: Movement) -> dict[str, Any]:
    return {"stepType": m.step_type, "input": m.input}


def sweep(tx: Tx, now: float, limit: int = 200) -> list[tuple[str, str]]:
    """Delete closed runs past their retention with their state, history and blobs.

    Returns the ``(flow_type, flow_id)`` of the deleted runs that were their Flow's latest:
    their Streams go too (here for Streams in the store; the caller frees in-memory ones).
    """
    gone: list[tuple[str, str]] = []
    for run_id in tx.flows.due_for_deletion(now, limit):
        flow = tx.flows.get(run_id)
        if flow is not None and tx.flows.latest(flow.flow_id) == flow:
            tx.streams.delete_flow(flow.flow_type, flow.flow_id)
            gone.append((flow.flow_type, flow.flow_id))
        tx.state.delete_run(run_id)
        tx.channels.delete_run(run_id)
        tx.executions.delete_run(run_id)
        tx.timers.delete_run(run_id)
        tx.locks.release_run(run_id)
        tx.rpc_requests.delete_run(run_id)
        tx.history.delete_run(run_id)
        tx.blobs.release_run(run_id)
        tx.search.delete_run(run_id)
        tx.flows.delete(run_id)
    return gone
