"""``dexcli session``: agent sessions over the server's public HTTP API.

Reads (``list``, ``show``, ``events``) use the committed-state read
(``POST /v1/flows/{id}/attributes``) and the ``AgentEvents`` Stream, so they work while no
Worker is connected. Actions run the session Flow's RPCs through ``POST /v1/flows/{id}/rpc``
(a Worker serving the Flow type runs them). The CLI does not import ``dex_agents``: it
decodes the persisted values by the agent layer's names, as Dex Web does.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import quote

import dex
import msgspec
from dex._protocol import (
    AttributeRangeSpec,
    AttributeValuesWire,
    ErrorCode,
    InvokeRpcRequest,
    InvokeRpcResponse,
    ReadAttributesRequest,
    StreamReadResponse,
)
from dex._transport import HttpTransport

from dex_server.cli._flows import connect, not_active
from dex_server.cli._output import (
    EXIT_NO_WORKER,
    EXIT_REQUEST_FAILED,
    CliError,
    Connection,
    Printer,
    human_time,
    not_found,
    rfc3339,
    usage_error,
)

T = TypeVar("T")

# The agent layer's persisted names (dex_agents._persistence).
AGENT_STATE = "AgentState"
AGENT_MESSAGES = "AgentMessages"
AGENT_TOOL_CALLS = "AgentToolCalls"
PENDING_INTERRUPTS = "PendingInterrupts"
AGENT_USAGE = "AgentUsage"
QUEUED_USER_MESSAGES = "QueuedUserMessages"
AGENT_EVENTS = "AgentEvents"
_KEY_DIGITS = 12  # AgentMessages keys: the 1-based sequence, zero-padded

# Session statuses: the live ones while the Flow runs, else the Flow's closing status.
LIVE_STATUSES = (
    "starting",
    "waiting-for-message",
    "running-model",
    "running-tools",
    "awaiting-approval",
)
CLOSED_STATUSES = ("completed", "failed", "canceled", "terminated", "continued_as_new")
# Filter words that stand for several statuses.
STATUS_GROUPS: dict[str, tuple[str, ...]] = {
    "active": LIVE_STATUSES,
    "running": ("starting", "running-model", "running-tools"),
    "closed": CLOSED_STATUSES,
}
FILTERS = (*LIVE_STATUSES, *CLOSED_STATUSES, *STATUS_GROUPS)

_TURN_ENDS = ("turn_completed", "turn_failed", "turn_steered", "turn_cancelled")
_LOCK_RETRY_S = 5.0
_SCAN_PAGE = 200
_READ_BATCH = 16
_LONG_POLL_S = 20.0


def session_status(flow_status: str, state: dict[str, Any] | None, pending: list[Any]) -> str:
    """One word for what a session does (``awaiting-approval`` wins while the Flow runs)."""
    if flow_status != "running":
        return flow_status
    if pending:
        return "awaiting-approval"
    if not state:
        return "starting"
    return {
        "waiting_for_user_message": "waiting-for-message",
        "running_model": "running-model",
        "running_tools": "running-tools",
    }.get(str(state.get("status", "")), str(state.get("status", "starting")))


def status_matches(wanted: str | None, status: str) -> bool:
    if wanted is None:
        return True
    return status in STATUS_GROUPS.get(wanted, (wanted,))


@dataclass
class Session:
    """One session's committed values (as decoded JSON)."""

    info: dex.FlowInfo
    state: dict[str, Any] | None
    pending: list[dict[str, Any]]
    usage: dict[str, Any]
    queued: int
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    messages: list[dict[str, Any]] = field(default_factory=list)

    @property
    def status(self) -> str:
        return session_status(self.info.status.value, self.state, self.pending)

    def summary(self) -> dict[str, Any]:
        state = self.state or {}
        return {
            "sessionId": self.info.flow_id,
            "runId": self.info.run_id,
            "flowType": self.info.flow_type,
            "status": self.status,
            "flowStatus": self.info.status.value,
            "turnCount": int(state.get("turn_count", 0)),
            "messageCount": int(state.get("message_count", 0)),
            "activeTurnId": state.get("active_turn_id"),
            "lastTurnError": state.get("last_turn_error"),
            "pendingApprovals": len(self.pending),
            "queuedMessages": self.queued,
            "startedAt": rfc3339(self.info.started_at.timestamp()),
            "closedAt": rfc3339(self.info.closed_at.timestamp()) if self.info.closed_at else None,
        }


def _decode(values: dict[str, msgspec.Raw], name: str) -> Any:
    raw = values.get(name)
    return None if raw is None else json.loads(bytes(raw))


def _physical(map_name: str, key: str) -> str:
    return f"{map_name}/{quote(key, safe='')}"


def _session_from(read: AttributeValuesWire) -> Session:
    values = read.values
    prefix = AGENT_TOOL_CALLS + "/"
    calls = [json.loads(bytes(v)) for n, v in values.items() if n.startswith(prefix)]
    calls = [c for c in calls if isinstance(c, dict)]
    calls.sort(key=lambda c: int(c.get("deferral_order", 0)))
    state = _decode(values, AGENT_STATE)
    pending = _decode(values, PENDING_INTERRUPTS) or []
    return Session(
        info=dex.FlowInfo.from_wire(read.info),
        state=state if isinstance(state, dict) else None,
        pending=[p for p in pending if isinstance(p, dict)],
        usage=_decode(values, AGENT_USAGE) or {},
        queued=read.channel_sizes.get(QUEUED_USER_MESSAGES, 0),
        tool_calls=calls,
    )


async def _read(
    client: dex.AsyncClient, flow_id: str, run_id: str = "", *, tool_calls: bool
) -> Session | None:
    """The session's committed values; None when the Flow's type is not an agent session.

    Naming ``AgentToolCalls`` as a map is what tells the types apart: the server refuses
    a map the Flow type does not declare.
    """
    request = ReadAttributesRequest(
        names=[AGENT_STATE, PENDING_INTERRUPTS, AGENT_USAGE],
        maps=[AGENT_TOOL_CALLS] if tool_calls else [],
        ranges=[] if tool_calls else [AttributeRangeSpec(map=AGENT_TOOL_CALLS, limit=1)],
        run_id=run_id,
    )
    try:
        read = await client.read_attributes(flow_id, request)
    except dex.BadRequestError:
        return None
    session = _session_from(read)
    if not tool_calls:
        session.tool_calls = []
    return session


async def _require(client: dex.AsyncClient, flow_id: str, *, tool_calls: bool = True) -> Session:
    try:
        session = await _read(client, flow_id, tool_calls=tool_calls)
    except dex.FlowNotFoundError:
        raise not_found(f"no session with ID {flow_id!r}", code="FLOW_NOT_FOUND") from None
    if session is None:
        info = await client.describe_flow(flow_id)
        raise not_found(
            f"Flow {flow_id!r} (type {info.flow_type!r}) is not an agent session",
            code="NOT_A_SESSION",
        )
    return session


async def _messages(client: dex.AsyncClient, session: Session, last: int) -> list[dict[str, Any]]:
    count = int((session.state or {}).get("message_count", 0))
    first = max(count - last + 1, 1)
    if count < first:
        return []
    start = _physical(AGENT_MESSAGES, f"{first:0{_KEY_DIGITS}d}")
    read = await client.read_attributes(
        session.info.flow_id,
        ReadAttributesRequest(
            ranges=[AttributeRangeSpec(map=AGENT_MESSAGES, start=start)],
            run_id=session.info.run_id,
        ),
    )
    messages = [json.loads(bytes(v)) for _, v in sorted(read.values.items())]
    return [m for m in messages if isinstance(m, dict)][-last:]


# --------------------------------------------------------------------------- list


async def session_list(
    conn: Connection,
    out: Printer,
    *,
    status: str | None,
    flow_type: str | None,
    limit: int,
) -> None:
    if status is not None and status not in FILTERS:
        raise usage_error(f"--status: expected one of {', '.join(FILTERS)}, got {status!r}")
    wanted = STATUS_GROUPS.get(status or "", (status,) if status else ())
    # the Flow status the server can filter on, when every wanted status shares one
    server_status: str | None = None
    if wanted and all(w in LIVE_STATUSES for w in wanted):
        server_status = "running"
    elif len(wanted) == 1 and wanted[0] in CLOSED_STATUSES:
        server_status = wanted[0]
    found: list[Session] = []
    agent_types: dict[str, bool] = {}
    token: str | None = None
    async with connect(conn) as client:
        while len(found) < limit:
            page = await client.list_flows(
                flow_type=flow_type, status=server_status, page_size=_SCAN_PAGE, page_token=token
            )
            infos = [i for i in page.flows if agent_types.get(i.flow_type, True)]
            for start in range(0, len(infos), _READ_BATCH):
                batch = infos[start : start + _READ_BATCH]
                reads = await asyncio.gather(
                    *(_read_listed(client, i) for i in batch), return_exceptions=False
                )
                for info, session in zip(batch, reads, strict=True):
                    if session is None:
                        agent_types.setdefault(info.flow_type, False)
                        continue
                    agent_types[info.flow_type] = True
                    if status_matches(status, session.status):
                        found.append(session)
            token = page.next_page_token or None
            if token is None:
                break
    found = found[:limit]
    if out.json:
        out.emit_json({"sessions": [s.summary() for s in found]})
        return
    if not found:
        what = f"{status} " if status else ""
        out.line(f"No {what}agent sessions" + (f" of type {flow_type!r}." if flow_type else "."))
        return
    rows = [
        [
            s.info.flow_id,
            s.info.flow_type,
            s.status,
            str(r["turnCount"]),
            str(r["messageCount"]),
            str(r["pendingApprovals"]),
            str(r["queuedMessages"]),
            human_time(s.info.started_at.timestamp()),
        ]
        for s in found
        for r in [s.summary()]
    ]
    out.table(
        None,
        ["SESSION ID", "TYPE", "STATUS", "TURNS", "MESSAGES", "APPROVALS", "QUEUED", "STARTED"],
        rows,
    )


async def _read_listed(client: dex.AsyncClient, info: dex.FlowInfo) -> Session | None:
    try:
        return await _read(client, info.flow_id, info.run_id, tool_calls=False)
    except dex.FlowNotFoundError:  # deleted by retention since the listing
        return None


# --------------------------------------------------------------------------- show


def _interrupt_json(item: dict[str, Any], calls: dict[str, dict[str, Any]]) -> dict[str, Any]:
    call = calls.get(str(item.get("tool_call_id")), {})
    created = item.get("created_at")
    deadline = item.get("deadline")
    return {
        "interruptId": item.get("interrupt_id"),
        "toolCallId": item.get("tool_call_id"),
        "turnId": item.get("turn_id"),
        "toolName": item.get("tool_name"),
        "arguments": item.get("arguments"),
        "effect": call.get("effect"),
        "createdAt": rfc3339(created) if isinstance(created, int | float) else None,
        "deadline": rfc3339(deadline) if isinstance(deadline, int | float) else None,
        "kind": _kind(item),
        "question": _question_json(item.get("question")),
    }


def _kind(item: dict[str, Any]) -> str:
    # an interrupt recorded before questions existed has no kind: it is an approval
    return str(item.get("kind") or "approval")


def _question_json(question: object) -> dict[str, Any] | None:
    if not isinstance(question, dict):
        return None
    return {
        "message": question.get("message"),
        "requestedSchema": question.get("requested_schema"),
        "url": question.get("url"),
    }


def _tool_call_json(call: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "tool_call_id",
        "turn_id",
        "tool_name",
        "arguments",
        "effect",
        "status",
        "requires_approval",
        "idempotency_key",
        "interrupt_id",
        "output",
        "error",
        "rejection_message",
    )
    return {_camel(k): call.get(k) for k in keys}


def _message_json(message: dict[str, Any]) -> dict[str, Any]:
    created = message.get("created_at")
    return {
        "sequence": message.get("sequence"),
        "turnId": message.get("turn_id"),
        "role": message.get("role"),
        "text": message.get("text", ""),
        "createdAt": rfc3339(created) if isinstance(created, int | float) and created else None,
    }


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p[:1].upper() + p[1:] for p in rest)


def _short(text: object, width: int = 120) -> str:
    one = " ".join(str(text if text is not None else "").split())
    return one if len(one) <= width else one[: width - 1] + "…"


async def session_show(conn: Connection, out: Printer, session_id: str, *, messages: int) -> None:
    async with connect(conn) as client:
        session = await _require(client, session_id)
        session.messages = await _messages(client, session, messages)
    calls = {str(c.get("tool_call_id")): c for c in session.tool_calls}
    record = session.summary()
    record["usage"] = {_camel(k): v for k, v in session.usage.items()}
    record["pendingApprovals"] = [_interrupt_json(p, calls) for p in session.pending]
    record["toolCalls"] = [_tool_call_json(c) for c in session.tool_calls]
    record["messages"] = [_message_json(m) for m in session.messages]
    if out.json:
        out.emit_json(record)
        return
    usage = record["usage"]
    out.fields(
        [
            ("Session", session.info.flow_id),
            ("Type", session.info.flow_type),
            ("Status", session.status),
            ("Run ID", session.info.run_id),
            ("Started (UTC)", human_time(session.info.started_at.timestamp())),
            (
                "Turns",
                f"{record['turnCount']} (active: {record['activeTurnId'] or '-'})",
            ),
            ("Queued messages", str(session.queued)),
            (
                "Usage",
                f"{usage.get('requests', 0)} model requests, {usage.get('inputTokens', 0)} in /"
                f" {usage.get('outputTokens', 0)} out / {usage.get('totalTokens', 0)} total tokens",
            ),
            ("Last turn error", record["lastTurnError"] or "-"),
        ]
    )
    if record["pendingApprovals"]:
        out.table(
            "Pending approvals",
            ["INTERRUPT", "KIND", "TOOL", "EFFECT", "ARGUMENTS / QUESTION", "DEADLINE (UTC)"],
            [
                [
                    str(p["interruptId"]),
                    p["kind"],
                    str(p["toolName"]),
                    str(p["effect"] or "-"),
                    _short(_asks(p) if p["question"] else p["arguments"]),
                    human_time(item.get("deadline")) if item.get("deadline") else "-",
                ]
                for p, item in zip(record["pendingApprovals"], session.pending, strict=True)
            ],
        )
        first_item = record["pendingApprovals"][0]
        first = first_item["interruptId"]
        if first_item["kind"] == "question":
            out.line(
                f"answer with: dexcli session answer {session_id} {first} --json '{{...}}'"
                f"  |  dexcli session answer {session_id} {first} --decline"
            )
        else:
            out.line(
                f"answer with: dexcli session approve {session_id} {first}"
                f"  |  dexcli session reject {session_id} {first} --reason TEXT"
            )
    else:
        out.line("No pending approvals.")
    if session.tool_calls:
        out.table(
            "Tool calls (active turn)",
            ["TOOL CALL", "TOOL", "EFFECT", "STATUS", "RESULT"],
            [
                [
                    str(c.get("tool_call_id")),
                    str(c.get("tool_name")),
                    str(c.get("effect")),
                    str(c.get("status")),
                    _short(c.get("output") or c.get("error") or c.get("rejection_message") or "-"),
                ]
                for c in session.tool_calls
            ],
        )
    if session.messages:
        out.table(
            f"Conversation (last {len(session.messages)} of {record['messageCount']} messages)",
            ["#", "TURN", "ROLE", "TEXT"],
            [
                [str(m.get(k)) for k in ("sequence", "turn_id", "role")] + [str(m.get("text", ""))]
                for m in session.messages
            ],
        )
    else:
        out.line("No messages yet.")


# --------------------------------------------------------------------------- actions


@asynccontextmanager
async def _transport(conn: Connection) -> AsyncIterator[HttpTransport]:
    http = HttpTransport(
        conn.server, credential=conn.token, timeout=conn.timeout_s if conn.timeout_s > 0 else None
    )
    try:
        yield http
    finally:
        await http.aclose()


async def _retry_lock_conflicts(call: Callable[[], Awaitable[T]]) -> T:
    # a Step may hold PendingInterrupts for a moment; the RPC is safe to send again
    deadline = time.monotonic() + _LOCK_RETRY_S
    delay = 0.05
    while True:
        try:
            return await call()
        except dex.RpcLockConflictError:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)


async def _rpc(
    conn: Connection, session: Session, rpc_name: str, value: object, rpc_timeout_s: float
) -> Any:
    """Run one of the session Flow's RPCs on a Worker; its decoded JSON output."""
    request = InvokeRpcRequest(
        rpc_name=rpc_name,
        input=msgspec.Raw(msgspec.json.encode(value)),
        timeout_s=rpc_timeout_s,
    )
    flow_id = session.info.flow_id
    path = f"/v1/flows/{quote(flow_id, safe='').replace('.', '%2E')}/rpc"
    http_timeout = None if conn.timeout_s <= 0 else max(conn.timeout_s, rpc_timeout_s + 5.0)
    async with _transport(conn) as http:
        try:
            response = await _retry_lock_conflicts(
                lambda: http.call(
                    "POST",
                    path,
                    InvokeRpcResponse,
                    body=request,
                    timeout=http_timeout,
                    flow_id=flow_id,
                )
            )
        except dex.NoWorkerAvailableError:
            raise CliError(
                f"no Worker serves Flow type {session.info.flow_type!r} right now, so"
                f" {rpc_name} was not run and nothing changed; start a Worker for it and try"
                " again (reads such as `dexcli session show` work meanwhile)",
                code=ErrorCode.NO_WORKER_AVAILABLE,
                exit_code=EXIT_NO_WORKER,
            ) from None
        except dex.FlowNotActiveOrNotFoundError:
            async with connect(conn) as client:
                raise await not_active(client, flow_id, what=rpc_name) from None
    return None if response.output is None else json.loads(bytes(response.output))


def _done(out: Printer, record: dict[str, Any], line: str) -> None:
    if out.json:
        out.emit_json(record)
    else:
        out.line(line)


async def _live(conn: Connection, session_id: str) -> Session:
    async with connect(conn) as client:
        session = await _require(client, session_id)
        if session.info.status is not dex.FlowStatus.RUNNING:
            raise CliError(
                f"session {session_id!r} is not running (it is {session.info.status.value});"
                " nothing was changed",
                code=ErrorCode.FLOW_NOT_ACTIVE,
                exit_code=EXIT_REQUEST_FAILED,
            )
    return session


async def session_send(
    conn: Connection, out: Printer, session_id: str, text: str, *, steer: bool, rpc_timeout_s: float
) -> None:
    if not text.strip():
        raise usage_error("the message is blank: nothing was sent")
    session = await _live(conn, session_id)
    rpc_name = "steer_user_message" if steer else "send_user_message"
    accepted = await _rpc(conn, session, rpc_name, {"text": text}, rpc_timeout_s)
    if accepted is not True:
        raise usage_error("the message is blank: nothing was sent")
    how = "steered: the running turn ends at its next safe point" if steer else "queued"
    _done(
        out,
        {"sessionId": session_id, "accepted": True, "steered": steer},
        f"message {how} ({session_id})",
    )


async def session_resolve(
    conn: Connection,
    out: Printer,
    session_id: str,
    interrupt_id: str,
    *,
    approved: bool,
    reason: str | None,
    rpc_timeout_s: float,
    arguments: str | None = None,
    approver: str | None = None,
    arguments_sha256: str | None = None,
) -> None:
    if arguments is not None:
        _check_arguments(arguments)
    session = await _live(conn, session_id)
    pending = [str(p.get("interrupt_id")) for p in session.pending]
    if interrupt_id not in pending:
        listed = ", ".join(pending) if pending else "none"
        raise not_found(
            f"no pending approval {interrupt_id!r} in session {session_id!r}"
            f" (pending: {listed}); nothing was changed",
            code="INTERRUPT_NOT_PENDING",
        )
    value = {
        "interrupt_id": interrupt_id,
        "approved": approved,
        "rejection_message": None if approved else reason,
        "arguments": arguments,
        "approver": approver,
        "arguments_sha256": arguments_sha256,
    }
    resolved = await _rpc(conn, session, "resolve_interrupt", value, rpc_timeout_s)
    if resolved is not True:
        raise not_found(
            f"approval {interrupt_id!r} did not apply: it is no longer pending (answered"
            " meanwhile, or its deadline passed), its arguments changed since the --sha256"
            " given, or this approver already approved; nothing was changed",
            code="INTERRUPT_NOT_PENDING",
        )
    verdict = "approved" if approved else "rejected" + (f" ({reason})" if reason else "")
    record: dict[str, Any] = {
        "sessionId": session_id,
        "interruptId": interrupt_id,
        "approved": approved,
        "reason": None if approved else reason,
    }
    if arguments is not None:
        record["arguments"] = json.loads(arguments)
    if approver is not None:
        record["approver"] = approver
    edited = " with edited arguments" if arguments is not None else ""
    _done(out, record, f"{interrupt_id} {verdict}{edited}")


def _asks(item: dict[str, Any]) -> str:
    question = item["question"]
    schema = question.get("requestedSchema") or {}
    fields = ", ".join(schema.get("properties") or {}) if isinstance(schema, dict) else ""
    asks = f"{question.get('message') or ''}"
    if fields:
        asks += f" [fields: {fields}]"
    if question.get("url"):
        asks += f" (url: {question['url']})"
    return asks


async def session_answer(
    conn: Connection,
    out: Printer,
    session_id: str,
    interrupt_id: str,
    *,
    answer: str | None,
    decline: bool,
    rpc_timeout_s: float,
) -> None:
    """Answer (or decline) a tool's pending question through ``resolve_interrupt``."""
    if decline == (answer is not None):
        raise usage_error("give exactly one of --json ANSWER or --decline; nothing was changed")
    content: dict[str, Any] | None = None
    if answer is not None:
        try:
            content = json.loads(answer)
        except ValueError as exc:
            raise usage_error(f"--json is not valid JSON ({exc}); nothing was changed") from None
        if not isinstance(content, dict):
            raise usage_error("--json must be a JSON object; nothing was changed")
    session = await _live(conn, session_id)
    questions = [str(p.get("interrupt_id")) for p in session.pending if _kind(p) == "question"]
    if interrupt_id not in questions:
        listed = ", ".join(questions) if questions else "none"
        raise not_found(
            f"no pending question {interrupt_id!r} in session {session_id!r}"
            f" (pending questions: {listed}); nothing was changed",
            code="INTERRUPT_NOT_PENDING",
        )
    value = {
        "interrupt_id": interrupt_id,
        "approved": not decline,
        "rejection_message": None,
        "answer": content,
    }
    resolved = await _rpc(conn, session, "resolve_interrupt", value, rpc_timeout_s)
    if resolved is not True:
        raise not_found(
            f"question {interrupt_id!r} is no longer pending (answered meanwhile, or its"
            " deadline passed); nothing was changed",
            code="INTERRUPT_NOT_PENDING",
        )
    record: dict[str, Any] = {
        "sessionId": session_id,
        "interruptId": interrupt_id,
        "answered": not decline,
        "answer": content,
    }
    _done(out, record, f"{interrupt_id} " + ("declined" if decline else "answered"))


def _check_arguments(arguments: str) -> None:
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        raise usage_error(f"--arguments is not valid JSON ({exc}); nothing was changed") from None
    if not isinstance(value, dict):
        raise usage_error("--arguments must be a JSON object; nothing was changed")


async def session_reconcile(
    conn: Connection,
    out: Printer,
    session_id: str,
    tool_call_id: str,
    *,
    succeeded: bool,
    note: str,
    reconciled_by: str,
    rpc_timeout_s: float,
) -> None:
    """Settle a tool call waiting in ``awaiting_reconciliation`` (``reconcile_tool_call``)."""
    if not note.strip():
        raise usage_error("--note is blank: a reconciliation needs its evidence")
    session = await _live(conn, session_id)
    value = {
        "tool_call_id": tool_call_id,
        "succeeded": succeeded,
        "note": note,
        "reconciled_by": reconciled_by,
    }
    settled = await _rpc(conn, session, "reconcile_tool_call", value, rpc_timeout_s)
    if settled is not True:
        raise not_found(
            f"tool call {tool_call_id!r} of session {session_id!r} is not waiting for"
            " reconciliation; nothing was changed",
            code="TOOL_CALL_NOT_AWAITING_RECONCILIATION",
        )
    outcome = "succeeded" if succeeded else "failed"
    _done(
        out,
        {"sessionId": session_id, "toolCallId": tool_call_id, "status": outcome},
        f"{tool_call_id} reconciled as {outcome}",
    )


async def session_cancel(
    conn: Connection, out: Printer, session_id: str, *, rpc_timeout_s: float
) -> None:
    session = await _live(conn, session_id)
    cancelled = await _rpc(conn, session, "cancel_turn", None, rpc_timeout_s)
    line = "turn cancel requested" if cancelled is True else "no turn is running: nothing to cancel"
    _done(out, {"sessionId": session_id, "cancelled": cancelled is True}, f"{line} ({session_id})")


async def session_stop(conn: Connection, out: Printer, session_id: str, reason: str | None) -> None:
    async with connect(conn) as client:
        session = await _require(client, session_id, tool_calls=False)
        try:
            await client.stop_flow(
                session_id, dex.StopFlowOptions(type=dex.StopType.CANCEL, reason=reason)
            )
        except dex.FlowNotActiveOrNotFoundError:
            raise await not_active(client, session_id) from None
    _done(
        out,
        {"sessionId": session_id, "stopped": True, "flowType": session.info.flow_type},
        f"stop requested for session {session_id}",
    )


# --------------------------------------------------------------------------- events


class AttemptGroups:
    """Keeps, per ``step_execution_id``, only the highest attempt seen (the seeds' rule).

    ``offer`` says whether an event counts: events of a lower attempt than one already
    seen for the same Step execution are dropped, and a higher attempt replaces the
    partial text of the lower ones.
    """

    def __init__(self) -> None:
        self.highest: dict[str, int] = {}

    def offer(self, event: dict[str, Any]) -> tuple[bool, int | None]:
        """``(kept, replaced_attempt)``: whether to show it, and the attempt it supersedes."""
        step = str(event.get("step_execution_id", ""))
        attempt = int(event.get("attempt", 1))
        seen = self.highest.get(step)
        if seen is not None and attempt < seen:
            return False, None
        self.highest[step] = attempt
        return True, seen if seen is not None and attempt > seen else None


def group_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Events grouped by (turn_id, step_execution_id, attempt), highest attempt per Step.

    Groups keep the order in which their first event arrived; ``text`` joins the
    ``text_delta`` events of the group.
    """
    highest: dict[str, int] = {}
    for e in events:
        step = str(e.get("step_execution_id", ""))
        highest[step] = max(highest.get(step, 0), int(e.get("attempt", 1)))
    groups: dict[tuple[str, str, int], dict[str, Any]] = {}
    for e in events:
        step, attempt = str(e.get("step_execution_id", "")), int(e.get("attempt", 1))
        if attempt < highest[step]:
            continue
        key = (str(e.get("turn_id", "")), step, attempt)
        group = groups.setdefault(
            key,
            {
                "turnId": key[0],
                "stepExecutionId": step,
                "attempt": attempt,
                "text": "",
                "events": [],
            },
        )
        if e.get("type") == "text_delta":
            group["text"] += str((e.get("data") or {}).get("text", ""))
        group["events"].append(e.get("type"))
    return list(groups.values())


def _describe(event: dict[str, Any]) -> str:
    data = event.get("data") or {}
    kind = event.get("type")
    if kind in ("text_delta", "reasoning_delta"):
        return str(data.get("text", ""))
    if kind in ("tool_call_started", "tool_call_finished", "tool_call_deferred"):
        extra = data.get("status") or data.get("effect") or ""
        return f"{data.get('tool_name', '')} {data.get('tool_call_id', '')} {extra}".strip()
    if kind == "interrupt_raised":
        return f"{data.get('interrupt_id', '')} for {data.get('tool_name', '')}"
    if kind == "interrupt_resolved":
        verdict = "approved" if data.get("approved") else "rejected"
        why = data.get("rejection_message")
        return f"{data.get('interrupt_id', '')} {verdict}" + (f": {why}" if why else "")
    if kind == "turn_failed":
        return str(data.get("error", ""))
    if kind == "usage_recorded":
        used = data.get("recorded") or {}
        return (
            f"{used.get('requests', 0)} requests, {used.get('input_tokens', 0)} in /"
            f" {used.get('output_tokens', 0)} out tokens"
        )
    return ", ".join(f"{k}={v}" for k, v in data.items()) if data else ""


def _event_record(message: Any) -> dict[str, Any]:
    event = json.loads(bytes(message.value))
    event = event if isinstance(event, dict) else {"type": "unknown", "data": event}
    created = event.get("created_at")
    return {
        "type": event.get("type"),
        "turn_id": event.get("turn_id"),
        "step_execution_id": event.get("step_execution_id"),
        "attempt": int(event.get("attempt", 1)),
        "data": event.get("data") or {},
        "createdAt": rfc3339(created) if isinstance(created, int | float) and created else None,
        "resumeToken": message.resume_token,
    }


def _event_json(event: dict[str, Any], replaced: int | None) -> dict[str, Any]:
    record = {
        "type": event["type"],
        "turnId": event["turn_id"],
        "stepExecutionId": event["step_execution_id"],
        "attempt": event["attempt"],
        "data": event["data"],
        "createdAt": event["createdAt"],
        "resumeToken": event["resumeToken"],
    }
    if replaced is not None:
        record["replacesAttempt"] = replaced
    return record


async def session_events(
    conn: Connection,
    out: Printer,
    session_id: str,
    *,
    follow: bool,
    resume_token: str,
    until_turn_end: bool,
    stop_after_s: float | None,
) -> None:
    async with connect(conn) as client:
        session = await _require(client, session_id, tool_calls=False)
    path = (
        f"/v1/streams/{quote(session.info.flow_type, safe='').replace('.', '%2E')}/"
        f"{AGENT_EVENTS}/{quote(session_id, safe='').replace('.', '%2E')}/next"
    )
    deadline = None if stop_after_s is None else time.monotonic() + stop_after_s
    groups = AttemptGroups()
    collected: list[dict[str, Any]] = []
    token = resume_token
    async with _transport(conn) as http:
        while True:
            wait_s = _LONG_POLL_S if follow else 0.0
            if deadline is not None:
                wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
            params = {"timeout_s": f"{wait_s:.3f}"}
            if token:
                params["resume_token"] = token
            try:
                read = await http.call(
                    "GET",
                    path,
                    StreamReadResponse,
                    params=params,
                    timeout=wait_s + 10.0,
                    flow_id=session_id,
                )
                message = read.message
            except dex.LongPollTimeoutError:
                message = None
            if message is None:
                if not follow or (deadline is not None and time.monotonic() >= deadline):
                    break
                continue
            token = message.resume_token
            event = _event_record(message)
            kept, replaced = groups.offer(event)
            if follow:
                if kept:
                    _print_live(out, event, replaced)
            else:
                collected.append(event)
            if until_turn_end and event["type"] in _TURN_ENDS:
                break
            if deadline is not None and time.monotonic() >= deadline:
                break
    if follow:
        return
    kept_events = [e for e in collected if e["attempt"] >= groups.highest[e["step_execution_id"]]]
    if out.json:
        out.emit_json(
            {
                "sessionId": session_id,
                "events": [_event_json(e, None) for e in kept_events],
                "groups": group_events(collected),
                "resumeToken": token,
            }
        )
        return
    if not collected:
        out.line("No retained events.")
        return
    out.table(
        f"Events of {session_id} (highest attempt per Step execution)",
        ["TURN", "STEP EXECUTION", "ATTEMPT", "TYPE", "DETAIL"],
        [
            [
                str(e["turn_id"]),
                str(e["step_execution_id"]),
                str(e["attempt"]),
                str(e["type"]),
                _short(_describe(e), 200),
            ]
            for e in kept_events
        ],
    )
    out.line(f"resume with: --resume-token {token}")


def _print_live(out: Printer, event: dict[str, Any], replaced: int | None) -> None:
    if out.json:
        out.emit_json_line(_event_json(event, replaced))
        return
    where = f"{event['turn_id']} {event['step_execution_id']} #{event['attempt']}"
    if replaced is not None:
        out.line(f"{where} replaces attempt {replaced}: its partial output is dropped")
    out.line(f"{where} {event['type']}: {_short(_describe(event), 500)}")
