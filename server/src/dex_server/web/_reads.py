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


def list_flows(
    tx: Tx, *, status: str | None, flow_type: str | None, prefix: str, size: int, before: str | None
) -> tuple[list[FlowRecord], str | None]:
    """One page of Flows, newest first, and the next page's token (None on the last page).

    With an ID prefix the store is scanned in pages (at most ``_SCAN_PAGES`` per request);
    when the budget runs out the page may be short and its token continues the scan.
    """
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
    return FlowView(
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


@dataclass
class SessionSummary:
    flow: FlowRecord
    status: str
    turn_count: int
    message_count: int
    approvals: int


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
                )
            )
    return sorted(out, key=lambda a: a.created_at)


def sessions(tx: Tx, specs: Specs, limit: int = 200) -> list[SessionSummary]:
    """The newest agent sessions (any status) with their state and approval counts."""
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
                approvals=len(pending),
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


def session_view(tx: Tx, specs: Specs, flow_id: str) -> SessionView | None:
    """A session's conversation from committed state; None when it is no agent session."""
    flow = _flows.require_flow(tx, flow_id)
    if not is_agent_session(spec_of(tx, specs, flow)):
        return None
    run = flow.run_id
    msgs = [decode(tx, v) for _, v in sorted(tx.state.of_maps(run, ["AgentMessages"]).items())]
    calls = [decode(tx, v) for v in tx.state.of_maps(run, ["AgentToolCalls"]).values()]
    calls.sort(key=lambda c: int((c or {}).get("deferral_order", 0)))
    return SessionView(
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
