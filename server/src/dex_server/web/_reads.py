"""Store read jobs behind Dex Web's pages: committed state only, no Worker involved."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import msgspec
from dex._protocol import FlowSpec, FlowStateWire, HistoryPage

from dex_server.service import _flows
from dex_server.service._common import Specs
from dex_server.store import FlowRecord, StoredValue, Tx
from dex_server.store._records import PendingMessage
from dex_server.web import _graph
from dex_server.web._graph import Graph

# the Step graph and a session's turns read at most this much history
_HISTORY_SCAN = 20_000
_HISTORY_CHUNK = 1_000
# an active Step that has not moved yet in its run learns its next Steps from this many
# of the newest other runs of its Flow type, this many events of each
_LEARN_RUNS = 5
_LEARN_EVENTS = 2_000
# a prefix filter scans pages of this many Flows, at most this many times per request
_SCAN_PAGE = 500
_SCAN_PAGES = 20

AGENT_DECLS = {
    "AgentState": "attribute",
    "AgentMessages": "attribute_map",
    "AgentToolCalls": "attribute_map",
    "PendingInterrupts": "attribute",
}


def spec_of(tx: Tx, specs: Specs, flow: FlowRecord) -> FlowSpec | None:
    """The spec the run started with, without touching the in-memory index."""
    idx = specs.known(flow.flow_type, flow.spec_version)
    return idx.spec if idx is not None else tx.specs.get(flow.flow_type, flow.spec_version)


def is_agent_session(spec: FlowSpec | None) -> bool:
    """Whether a Flow type's persistence schema is an agent session's."""
    if spec is None:
        return False
    kinds = {d.name: d.kind for d in spec.state}
    return all(kinds.get(name) == kind for name, kind in AGENT_DECLS.items())


def run_id_floor(ts: float) -> str:
    """The smallest UUIDv7 run ID of millisecond ``ts``: run IDs below it started earlier."""
    return f"{(max(0, int(ts * 1000)) << 80):032x}"


def list_flows(
    tx: Tx,
    *,
    status: str | None,
    flow_type: str | None,
    prefix: str,
    size: int,
    before: str | None,
    started_after: float | None = None,
    started_before: float | None = None,
) -> tuple[list[FlowRecord], str | None]:
    """One page of Flows, newest first, and the next page's token (None on the last page).

    With an ID prefix the store is scanned in pages (at most ``_SCAN_PAGES`` per request);
    when the budget runs out the page may be short and its token continues the scan.
    Run IDs are UUIDv7s in start order, so ``started_before`` moves the first cursor and
    ``started_after`` ends the scan; both also filter on the recorded start time.
    """
    if started_before is not None:
        # a second of slack: a run ID's clock reading and started_at differ slightly
        floor = run_id_floor(started_before + 1.0)
        before = floor if before is None or floor < before else before
    if started_after is not None or started_before is not None:
        return _scan_flows(
            tx, status, flow_type, prefix, size, before, started_after, started_before
        )
    if not prefix:
        rows = tx.flows.page(
            flow_type=flow_type, status=status, limit=size + 1, before_run_id=before
        )
        page = rows[:size]
        return page, page[-1].run_id if len(rows) > size else None
    out: list[FlowRecord] = []
    cursor = before
    for _ in range(_SCAN_PAGES):
        rows = tx.flows.page(
            flow_type=flow_type, status=status, limit=_SCAN_PAGE, before_run_id=cursor
        )
        for r in rows:
            if r.flow_id.startswith(prefix):
                out.append(r)
                if len(out) > size:
                    return out[:size], out[size - 1].run_id
        if len(rows) < _SCAN_PAGE:
            return out, None
        cursor = rows[-1].run_id
    return out, cursor


def _scan_flows(
    tx: Tx,
    status: str | None,
    flow_type: str | None,
    prefix: str,
    size: int,
    cursor: str | None,
    after: float | None,
    before: float | None,
) -> tuple[list[FlowRecord], str | None]:
    out: list[FlowRecord] = []
    for _ in range(_SCAN_PAGES):
        rows = tx.flows.page(
            flow_type=flow_type, status=status, limit=_SCAN_PAGE, before_run_id=cursor
        )
        for r in rows:
            if after is not None and r.started_at < after - 1.0:
                return out, None  # older from here on
            if (
                r.flow_id.startswith(prefix)
                and (after is None or r.started_at >= after)
                and (before is None or r.started_at < before)
            ):
                out.append(r)
                if len(out) > size:
                    return out[:size], out[size - 1].run_id
        if len(rows) < _SCAN_PAGE:
            return out, None
        cursor = rows[-1].run_id
    return out, cursor


def value_bytes(tx: Tx, v: StoredValue) -> bytes | None:
    """The JSON bytes of a stored value (blob references are resolved)."""
    data = tx.blobs.get(v.blob) if v.blob is not None else v.value
    return bytes(data) if data is not None else None


def decode(tx: Tx, v: StoredValue | None) -> Any:
    """A stored value decoded from JSON (None when absent)."""
    if v is None:
        return None
    data = value_bytes(tx, v)
    return json.loads(data) if data is not None else None


@dataclass
class FlowView:
    state: FlowStateWire
    spec: FlowSpec | None
    attributes: dict[str, bytes] = field(default_factory=dict)
    pending: list[PendingMessage] = field(default_factory=list)
    history: HistoryPage | None = None
    error_type: str | None = None
    error_message: str | None = None
    timers: list[TimerView] = field(default_factory=list)
    graph: Graph | None = None


def flow_view(
    tx: Tx,
    specs: Specs,
    flow_id: str,
    running: dict[tuple[str, str], str],
    history_after: str,
    history_size: int,
) -> FlowView:
    """Everything the run details page shows of a Flow's latest run."""
    state = _flows.state_of(tx, flow_id, running)
    flow = _flows.require_flow(tx, flow_id)
    spec = spec_of(tx, specs, flow)
    decls = spec.state if spec is not None else []
    attributes = {
        n: b for n, v in tx.state.singletons(flow.run_id).items() if (b := value_bytes(tx, v))
    }
    maps = [d.name for d in decls if d.kind == "attribute_map"]
    if maps:
        for n, v in tx.state.of_maps(flow.run_id, maps).items():
            b = value_bytes(tx, v)
            if b is not None:
                attributes[n] = b
    channels = [d.name for d in decls if d.kind == "channel"]
    channel_maps = [d.name for d in decls if d.kind == "channel_map"]
    pending = tx.channels.pending(flow.run_id, channels, channel_maps)
    history = _flows.history_page(tx, flow_id, flow.run_id, history_size, history_after)
    events, truncated = step_events(tx, flow.run_id)
    graph = _graph.build(spec, events, state.active_steps, truncated=truncated)
    if _graph.unmoved_active(graph):
        graph = _graph.build(
            spec,
            events,
            state.active_steps,
            truncated=truncated,
            learned=learned_moves(tx, flow),
        )
    return FlowView(
        timers=timers(tx, flow.run_id),
        graph=graph,
        state=state,
        spec=spec,
        attributes=dict(sorted(attributes.items())),
        pending=pending,
        history=history,
        error_type=flow.error_type,
        error_message=flow.error_message,
    )


@dataclass
class Approval:
    flow_id: str
    flow_type: str
    interrupt_id: str
    tool_name: str
    arguments: str
    created_at: float
    deadline: float | None
    effect: str
    # "question" when a running tool asks a person for input (``question`` holds the
    # tool's message, requested_schema and url, as recorded)
    kind: str = "approval"
    question: dict[str, Any] | None = None


@dataclass
class SessionSummary:
    flow: FlowRecord
    status: str
    turn_count: int
    message_count: int
    approvals: int
    questions: int = 0


def _agent_runs(tx: Tx, specs: Specs, flows: list[FlowRecord]) -> list[FlowRecord]:
    return [f for f in flows if is_agent_session(spec_of(tx, specs, f))]


def approvals(tx: Tx, specs: Specs) -> list[Approval]:
    """Every pending approval of every running agent session, oldest first."""
    out: list[Approval] = []
    for flow in _agent_runs(tx, specs, tx.flows.running()):
        pending = decode(tx, tx.state.get(flow.run_id, "PendingInterrupts")) or []
        if not pending:
            continue
        calls = tx.state.of_maps(flow.run_id, ["AgentToolCalls"])
        for item in pending:
            call = decode(tx, calls.get(f"AgentToolCalls/{item.get('tool_call_id')}")) or {}
            out.append(
                Approval(
                    flow_id=flow.flow_id,
                    flow_type=flow.flow_type,
                    interrupt_id=str(item.get("interrupt_id", "")),
                    tool_name=str(item.get("tool_name", "")),
                    arguments=str(item.get("arguments", "")),
                    created_at=float(item.get("created_at") or 0.0),
                    deadline=item.get("deadline"),
                    effect=str(call.get("effect", "")),
                    kind=str(item.get("kind") or "approval"),
                    question=q if isinstance(q := item.get("question"), dict) else None,
                )
            )
    return sorted(out, key=lambda a: a.created_at)


def sessions(tx: Tx, specs: Specs, limit: int = 200) -> list[SessionSummary]:
    """The newest agent sessions (any status) with their state, approval and question counts."""
    out: list[SessionSummary] = []
    for flow in _agent_runs(
        tx, specs, tx.flows.page(flow_type=None, status=None, limit=limit, before_run_id=None)
    ):
        state = decode(tx, tx.state.get(flow.run_id, "AgentState")) or {}
        pending = decode(tx, tx.state.get(flow.run_id, "PendingInterrupts")) or []
        out.append(
            SessionSummary(
                flow=flow,
                status=str(state.get("status", "starting")),
                turn_count=int(state.get("turn_count", 0)),
                message_count=int(state.get("message_count", 0)),
                # a tool's question waits in the same list, under its own kind
                approvals=sum(1 for p in pending if (p.get("kind") or "approval") == "approval"),
                questions=sum(1 for p in pending if (p.get("kind") or "approval") != "approval"),
            )
        )
    return out


@dataclass
class SessionView:
    flow: FlowRecord
    state: dict[str, Any]
    messages: list[dict[str, Any]]
    tool_calls: list[dict[str, Any]]
    pending: list[dict[str, Any]]
    usage: dict[str, Any]
    queued: int
    turns: list[TurnView] = field(default_factory=list)
    turns_truncated: bool = False


def session_view(tx: Tx, specs: Specs, flow_id: str) -> SessionView | None:
    """A session's conversation from committed state; None when it is no agent session."""
    flow = _flows.require_flow(tx, flow_id)
    if not is_agent_session(spec_of(tx, specs, flow)):
        return None
    run = flow.run_id
    msgs = [decode(tx, v) for _, v in sorted(tx.state.of_maps(run, ["AgentMessages"]).items())]
    calls = [decode(tx, v) for v in tx.state.of_maps(run, ["AgentToolCalls"]).values()]
    calls.sort(key=lambda c: int((c or {}).get("deferral_order", 0)))
    past, more = turns(tx, run)
    return SessionView(
        turns=past,
        turns_truncated=more,
        flow=flow,
        state=decode(tx, tx.state.get(run, "AgentState")) or {},
        messages=[m for m in msgs if isinstance(m, dict)],
        tool_calls=[c for c in calls if isinstance(c, dict)],
        pending=decode(tx, tx.state.get(run, "PendingInterrupts")) or [],
        usage=decode(tx, tx.state.get(run, "AgentUsage")) or {},
        queued=tx.channels.sizes(run).get("QueuedUserMessages", 0),
    )


def encode_json(value: object) -> msgspec.Raw:
    """A JSON value as the raw input of an RPC."""
    return msgspec.Raw(msgspec.json.encode(value))


# ----------------------------------------------------------------- timers, history, values


@dataclass
class TimerView:
    execution_id: str
    step_type: str
    condition_id: str | None
    fire_at: float
    wait_mode: str


def timers(tx: Tx, run_id: str) -> list[TimerView]:
    """The timers of every waiting execution (absolute fire times), soonest first."""
    out: list[TimerView] = []
    for e in tx.executions.of_run(run_id):
        if e.phase != "waiting" or e.wait is None:
            continue
        for c in e.wait.conditions:
            if c.kind == "timer" and c.fire_at is not None:
                out.append(
                    TimerView(e.execution_id, e.step_type, c.condition_id, c.fire_at, e.wait.mode)
                )
    return sorted(out, key=lambda t: t.fire_at)


def learned_moves(tx: Tx, flow: FlowRecord) -> list[tuple[str, str]]:
    """The Step moves of the newest other runs of ``flow``'s type (same spec version)."""
    out: list[tuple[str, str]] = []
    others = tx.flows.page(
        flow_type=flow.flow_type, status=None, limit=_LEARN_RUNS + 1, before_run_id=None
    )
    for other in others:
        if other.run_id == flow.run_id or other.spec_version != flow.spec_version:
            continue
        rows, _ = history_rows(tx, other.run_id, _LEARN_EVENTS)
        out.extend(_graph.moves((ty, bytes(p)) for _, _, ty, p in rows if ty.startswith("Step")))
    return out


def history_rows(
    tx: Tx, run_id: str, limit: int = _HISTORY_SCAN
) -> tuple[list[tuple[int, float, str, bytes]], bool]:
    """A run's history from its start, up to ``limit`` events (True: there is more)."""
    rows: list[tuple[int, float, str, bytes]] = []
    after = 0
    while len(rows) < limit:
        chunk = tx.history.page(run_id, after, _HISTORY_CHUNK)
        rows.extend(chunk)
        if len(chunk) < _HISTORY_CHUNK:
            return rows, False
        after = chunk[-1][0]
    return rows, True


def step_events(tx: Tx, run_id: str) -> tuple[list[tuple[str, bytes]], bool]:
    rows, more = history_rows(tx, run_id)
    return [(ty, bytes(p)) for _, _, ty, p in rows if ty.startswith("Step")], more


def attribute_value(tx: Tx, flow_id: str, name: str) -> bytes | None:
    """The whole JSON value of one Attribute (or map instance) of the latest run."""
    flow = _flows.require_flow(tx, flow_id)
    v = tx.state.get(flow.run_id, name)
    return value_bytes(tx, v) if v is not None else None


def message_value(tx: Tx, specs: Specs, flow_id: str, message_id: str) -> bytes | None:
    """The whole value of one pending Channel message of the latest run."""
    flow = _flows.require_flow(tx, flow_id)
    spec = spec_of(tx, specs, flow)
    decls = spec.state if spec is not None else []
    pending = tx.channels.pending(
        flow.run_id,
        [d.name for d in decls if d.kind == "channel"],
        [d.name for d in decls if d.kind == "channel_map"],
    )
    return next((bytes(m.value) for m in pending if m.message_id == message_id), None)


def event_payload(
    tx: Tx, flow_id: str, event_id: int, run_id: str = ""
) -> tuple[str, bytes] | None:
    """The type and whole raw JSON of one history event of the latest run (or ``run_id``)."""
    flow = _flows.require_flow(tx, flow_id, run_id)
    rows = tx.history.page(flow.run_id, event_id - 1, 1)
    if not rows or rows[0][0] != event_id:
        return None
    return rows[0][2], bytes(rows[0][3])


# ------------------------------------------------------------------- a session's turns

_RUN_STATUSES = ("succeeded", "failed", "outcome_unknown")


@dataclass
class TurnView:
    turn_id: str
    usage: dict[str, int] = field(default_factory=dict)
    tool_calls: dict[str, dict[str, Any]] = field(default_factory=dict)


def _stored(tx: Tx, raw: object) -> Any:
    """A value from a history payload, with a blob reference read from the store."""
    if isinstance(raw, dict) and isinstance(ref := raw.get("__dexBlobReference"), dict):
        data = tx.blobs.get(str(ref.get("id")))
        return json.loads(data) if data is not None else None
    return raw


def turns(tx: Tx, run_id: str) -> tuple[list[TurnView], bool]:
    """Every turn's usage and tool calls (with timing), rebuilt from the run's history.

    The session keeps only the active turn's tool call records, and only the total usage;
    the history keeps each Step's writes. Usage deltas go to the turn the session counted
    (``AgentState.turn_count``) when they were written. A tool call's timing is that of the
    Step execution whose input is the call's ID and which wrote its result.
    """
    rows, more = history_rows(tx, run_id)
    out: dict[str, TurnView] = {}
    current = ""
    total: dict[str, int] = {}
    for _, _, ty, payload in rows:
        # Steps and RPCs write the session's records (a cancel finishes waiting calls)
        if not ty.startswith("Step") and ty != "RpcExecutionCompleted":
            continue
        try:
            ev = json.loads(payload)
        except ValueError:
            continue
        writes = (ev.get("output") or {}).get("attributeWrites") or {}
        if not writes:
            continue
        state = _stored(tx, writes.get("AgentState"))
        if isinstance(state, dict) and state.get("turn_count"):
            current = f"turn-{int(state['turn_count'])}"
        usage = _stored(tx, writes.get("AgentUsage"))
        if isinstance(usage, dict) and current:
            turn = out.setdefault(current, TurnView(current))
            for k, v in usage.items():
                if isinstance(v, int):
                    turn.usage[k] = turn.usage.get(k, 0) + v - total.get(k, 0)
                    total[k] = v
        ctx = ev.get("context") or {}
        step_input = (ev.get("input") or {}).get("stepInput")
        for name, raw in writes.items():
            if not name.startswith("AgentToolCalls/"):
                continue
            record = _stored(tx, raw)
            if not isinstance(record, dict):
                continue
            tid = str(record.get("turn_id") or current)
            turn = out.setdefault(tid, TurnView(tid))
            call = turn.tool_calls.setdefault(str(record.get("tool_call_id")), {})
            call.update(record)
            if (
                record.get("status") in _RUN_STATUSES
                and step_input == record.get("tool_call_id")
                and "startedTime" in ctx
            ):
                started = float(ctx["startedTime"])
                call["started_at"] = started
                call["finished_at"] = started + float(ctx.get("duration") or 0.0)
                call["attempts"] = ctx.get("finalAttempt")
    return sorted(out.values(), key=lambda t: _turn_number(t.turn_id)), more


def _turn_number(turn_id: str) -> int:
    try:
        return int(turn_id.rsplit("-", 1)[-1])
    except ValueError:
        return 0


def blob_ids(value: object) -> list[str]:
    """The blob references inside a decoded history payload, in order, each once."""
    found: list[str] = []

    def walk(v: object) -> None:
        if isinstance(v, dict):
            ref = v.get("__dexBlobReference")
            if isinstance(ref, dict) and isinstance(ref.get("id"), str):
                found.append(ref["id"])
                return
            for x in v.values():
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)

    walk(value)
    return list(dict.fromkeys(found))


def event_blob(tx: Tx, flow_id: str, event_id: int, blob: str, run_id: str = "") -> bytes | None:
    """A value one history event refers to by blob reference (None unless it does)."""
    found = event_payload(tx, flow_id, event_id, run_id)
    if found is None:
        return None
    try:
        refs = blob_ids(json.loads(found[1]))
    except ValueError:
        return None
    if blob not in refs:
        return None
    data = tx.blobs.get(blob)
    return bytes(data) if data is not None else None
