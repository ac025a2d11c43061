"""The commands that talk to a running server, through the public ``dex.AsyncClient``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import dex
import msgspec
from dex._protocol import HistoryEventWire

from dex_server.cli._output import (
    EXIT_REQUEST_FAILED,
    CliError,
    Connection,
    Printer,
    camel_keys,
    human_time,
    not_found,
    rfc3339,
    usage_error,
)
from dex_server.engine.query import listing_conditions, with_conditions

STOP_TYPES = tuple(t.value for t in dex.StopType)
STATUSES = tuple(s.value for s in dex.FlowStatus)
_NO_TIMEOUT_S = 1e9


@asynccontextmanager
async def connect(conn: Connection) -> AsyncIterator[dex.AsyncClient]:
    options = dex.ClientOptions(
        server_address=conn.server,
        credential=conn.token,
        timeout=conn.timeout_s if conn.timeout_s > 0 else _NO_TIMEOUT_S,
    )
    # The CLI decodes no user values, so it needs no Flow definitions.
    async with dex.AsyncClient(dex.Registry([]), options=options) as client:
        yield client


def _flow_record(info: dex.FlowInfo) -> dict[str, Any]:
    record: dict[str, Any] = {
        "flowId": info.flow_id,
        "runId": info.run_id,
        "flowType": info.flow_type,
        "status": info.status.value,
        "startedAt": rfc3339(info.started_at.timestamp()),
    }
    if info.closed_at is not None:
        record["closedAt"] = rfc3339(info.closed_at.timestamp())
    return record


# --------------------------------------------------------------------------- flow list


async def flow_list(
    conn: Connection,
    out: Printer,
    *,
    flow_type: str | None,
    status: str | None,
    page_size: int,
    page_token: str | None,
    fetch_all: bool,
    query: str | None = None,
) -> None:
    if status is not None and status not in STATUSES:
        raise usage_error(f"--status: expected one of {', '.join(STATUSES)}, got {status!r}")
    if query is not None:
        await _flow_search(conn, out, query, flow_type, status, page_size, page_token, fetch_all)
        return
    infos: list[dex.FlowInfo] = []
    token = page_token
    async with connect(conn) as client:
        while True:
            page = await client.list_flows(
                flow_type=flow_type, status=status, page_size=page_size, page_token=token
            )
            infos.extend(page.flows)
            token = page.next_page_token or None
            if not fetch_all or token is None:
                break
    if out.json:
        out.emit_json({"flows": [_flow_record(i) for i in infos], "nextPageToken": token})
        return
    rows = [
        [
            info.flow_id,
            info.flow_type,
            info.status.value,
            human_time(info.started_at.timestamp()),
            human_time(info.closed_at.timestamp()) if info.closed_at else "-",
        ]
        for info in infos
    ]
    if not rows and flow_type is not None:
        # an empty table alone does not tell a misspelt type from a type with no Flows
        out.line(await _no_flows_of_type(conn, flow_type, status))
        return
    out.table(None, ["FLOW ID", "TYPE", "STATUS", "STARTED (UTC)", "CLOSED (UTC)"], rows)
    if token:
        out.line(f"more: --page-token {token} (or --all)")


async def _no_flows_of_type(conn: Connection, flow_type: str, status: str | None) -> str:
    """The line printed for an empty ``--type`` listing, with the types seen lately."""
    async with connect(conn) as client:
        page = await client.list_flows(page_size=1000)
    seen = sorted({i.flow_type for i in page.flows})
    what = f"no {status + ' ' if status else ''}Flows of type {flow_type!r}"
    if flow_type in seen:
        return what
    close = [t for t in seen if t.lower() == flow_type.lower()]
    if close:
        return f"{what} (type names are case-sensitive: did you mean {close[0]!r}?)"
    if seen:
        return f"{what}; types of the newest Flows: {', '.join(seen[:20])}"
    return f"{what}; the server holds no Flows"


def _search_query(query: str, flow_type: str | None, status: str | None) -> str:
    """``query`` with ``--type`` / ``--status`` added as conditions."""
    return with_conditions(query, listing_conditions(status=status, flow_type=flow_type))


async def _flow_search(
    conn: Connection,
    out: Printer,
    query: str,
    flow_type: str | None,
    status: str | None,
    page_size: int,
    page_token: str | None,
    fetch_all: bool,
) -> None:
    entries: list[dex.SearchFlowEntry] = []
    token = page_token or ""
    text = _search_query(query, flow_type, status)
    async with connect(conn) as client:
        while True:
            page = await client.search_flows(text, page_size, token)
            entries.extend(page.flows)
            token = page.next_page_token
            if not fetch_all or not token:
                break
    records = []
    for e in entries:
        info = dex.FlowInfo(
            e.flow_id, e.run_id, e.flow_type, e.status, e.started_at, closed_at=e.closed_at
        )
        records.append({**_flow_record(info), "indexedAttributes": dict(e.indexed_attributes)})
    if out.json:
        out.emit_json({"flows": records, "nextPageToken": token or None})
        return
    rows = [
        [
            r["flowId"],
            r["flowType"],
            r["status"],
            human_time(e.started_at.timestamp()),
            human_time(e.closed_at.timestamp()) if e.closed_at else "-",
            msgspec.json.encode(r["indexedAttributes"]).decode(),
        ]
        for r, e in zip(records, entries, strict=True)
    ]
    headers = ["FLOW ID", "TYPE", "STATUS", "STARTED (UTC)", "CLOSED (UTC)", "INDEXED"]
    out.table(None, headers, rows)
    if token:
        out.line(f"more: --page-token {token} (or --all)")


# --------------------------------------------------------------------------- flow show


async def flow_show(conn: Connection, out: Printer, flow_id: str) -> None:
    async with connect(conn) as client:
        state = await client.get_flow_state(flow_id)
    record = _flow_record(dex.FlowInfo.from_wire(state.info))
    record["activeSteps"] = [camel_keys(msgspec.to_builtins(s)) for s in state.active_steps]
    record["channelSizes"] = dict(state.channel_sizes)
    record["attributeNames"] = list(state.attribute_names)
    extra: list[tuple[str, str]] = []
    if state.info.config is not None:
        record["config"] = camel_keys(msgspec.to_builtins(state.info.config))
        extra.append(("Config", msgspec.json.encode(record["config"]).decode()))
    if state.info.timeout_at is not None:
        record["timeoutAt"] = rfc3339(state.info.timeout_at)
        extra.append(("Timeout at (UTC)", human_time(state.info.timeout_at)))
    if out.json:
        out.emit_json(record)
        return
    out.fields(
        [
            ("Flow ID", record["flowId"]),
            ("Run ID", record["runId"]),
            ("Type", record["flowType"]),
            ("Status", record["status"]),
            ("Started (UTC)", human_time(state.info.started_at)),
            ("Closed (UTC)", human_time(state.info.closed_at)),
            ("Attributes", ", ".join(record["attributeNames"]) or "-"),
            (
                "Channels",
                ", ".join(f"{k}={v}" for k, v in sorted(record["channelSizes"].items())) or "-",
            ),
            *extra,
        ]
    )
    rows = [
        [
            s.step_execution_id,
            s.phase,
            str(s.attempt),
            s.from_step_execution_id,
            s.last_failure.message if s.last_failure else "-",
        ]
        for s in state.active_steps
    ]
    if not rows:
        out.line("No active Steps.")
        return
    out.table("Active Steps", ["STEP EXECUTION", "PHASE", "ATTEMPT", "FROM", "LAST FAILURE"], rows)


# --------------------------------------------------------------------------- flow history


async def _run_not_found(client: dex.AsyncClient, flow_id: str, run_id: str) -> CliError:
    """The error for ``--run-id`` naming no run of an existing Flow (else: no such Flow)."""
    try:
        info = await client.describe_flow(flow_id)
    except dex.FlowNotFoundError:
        return not_found(f"no Flow with ID {flow_id!r}", code="FLOW_NOT_FOUND")
    return not_found(
        f"Flow {flow_id!r} has no run {run_id!r} (its latest run is {info.run_id})",
        code="RUN_NOT_FOUND",
    )


# Top-level and context fields of history payloads that hold Unix seconds.
_TIME_FIELDS = ("startedTime", "closedTime", "scheduledTime")


def _payload_json(payload: msgspec.Raw) -> msgspec.Raw:
    """The payload with its engine time fields as RFC 3339; user values stay byte for byte."""
    try:
        top = msgspec.json.decode(payload, type=dict[str, msgspec.Raw])
    except msgspec.DecodeError:
        return payload
    changed = False
    for key in _TIME_FIELDS:
        if key in top:
            value = msgspec.json.decode(top[key])
            if isinstance(value, int | float) and not isinstance(value, bool):
                top[key] = msgspec.Raw(msgspec.json.encode(rfc3339(value)))
                changed = True
    if "context" in top:
        ctx = msgspec.json.decode(top["context"])
        if isinstance(ctx, dict):
            for key in _TIME_FIELDS:
                value = ctx.get(key)
                if isinstance(value, int | float) and not isinstance(value, bool):
                    ctx[key] = rfc3339(value)
                    changed = True
            top["context"] = msgspec.Raw(msgspec.json.encode(ctx))
    return msgspec.Raw(msgspec.json.encode(top)) if changed else payload


def _event_json(event: HistoryEventWire) -> dict[str, object]:
    return {
        "eventId": str(event.event_id),
        "eventTime": rfc3339(event.event_time),
        "type": event.type,
        "payload": _payload_json(event.payload),
    }


def _event_row(event: HistoryEventWire) -> list[str]:
    payload = msgspec.json.decode(event.payload)
    payload = payload if isinstance(payload, dict) else {}
    ctx = payload.get("context")
    ctx = ctx if isinstance(ctx, dict) else {}
    what = str(ctx.get("stepExecutionId") or "")
    if event.type == "RpcExecutionCompleted":
        what = f"rpc {payload.get('rpcName', '')}"
    elif event.type == "FlowClosed":
        what = str(payload.get("status", ""))
    elif event.type == "FlowStarted":
        what = str(payload.get("startStepType") or payload.get("flowType") or "")
    elif event.type == "FlowTimeoutFired":
        what = f"timeout {payload.get('policy', '')}"
    parts = [f"attempt {ctx['finalAttempt']}"] if "finalAttempt" in ctx else []
    duration = ctx.get("duration")
    if isinstance(duration, int | float):
        parts.append(f"{duration * 1000:.1f} ms")
    output = payload.get("output")
    failure = output.get("failure") if isinstance(output, dict) else None
    if isinstance(failure, dict):
        parts.append(f"{failure.get('errorType') or 'error'}: {failure.get('message') or ''}")
    if event.type == "FlowClosed":
        error = payload.get("errorMessage") or payload.get("errorDetail")
        if payload.get("errorType") or error:
            parts.append(f"{payload.get('errorType') or 'reason'}: {error or ''}".rstrip(": "))
    detail = ", ".join(parts)
    return [str(event.event_id), human_time(event.event_time, short=True), event.type, what, detail]


async def flow_history(
    conn: Connection,
    out: Printer,
    flow_id: str,
    *,
    run_id: str,
    page_size: int,
    page_token: str | None,
    fetch_all: bool,
) -> None:
    events: list[HistoryEventWire] = []
    token = page_token
    async with connect(conn) as client:
        while True:
            try:
                page = await client.get_history(
                    flow_id, run_id=run_id, page_size=page_size, page_token=token
                )
            except dex.FlowNotFoundError:
                if run_id:
                    raise await _run_not_found(client, flow_id, run_id) from None
                raise
            run_id = page.run_id
            events.extend(page.events)
            token = page.next_page_token or None
            if not fetch_all or token is None:
                break
    if out.json:
        out.emit_json(
            {
                "flowId": flow_id,
                "runId": run_id,
                "events": [_event_json(e) for e in events],
                "nextPageToken": token,
            }
        )
        return
    out.table(
        f"History of {flow_id} (run {run_id})",
        ["ID", "TIME (UTC)", "TYPE", "STEP / WHAT", "DETAIL"],
        [_event_row(e) for e in events],
    )
    if token:
        out.line(f"more: --page-token {token} (or --all)")


# --------------------------------------------------------------------------- stop, health


async def flow_stop(
    conn: Connection, out: Printer, flow_id: str, *, stop_type: str, reason: str | None
) -> None:
    if stop_type not in STOP_TYPES:
        raise usage_error(f"--type: expected one of {', '.join(STOP_TYPES)}, got {stop_type!r}")
    options = dex.StopFlowOptions(type=dex.StopType(stop_type), reason=reason)
    async with connect(conn) as client:
        try:
            await client.stop_flow(flow_id, options)
        except dex.FlowNotActiveOrNotFoundError:
            raise await not_active(client, flow_id) from None
    if out.json:
        out.emit_json({"flowId": flow_id, "stopped": True, "type": stop_type})
    else:
        out.line(f"stop requested for {flow_id} ({stop_type})")


async def not_active(client: dex.AsyncClient, flow_id: str, what: str = "stop") -> CliError:
    """Tell an unknown Flow (exit 3) from one that is no longer running (exit 1)."""
    try:
        info = await client.describe_flow(flow_id)
    except dex.FlowNotFoundError:
        return not_found(f"no Flow with ID {flow_id!r}", code="FLOW_NOT_FOUND")
    return CliError(
        f"Flow {flow_id!r} is not running (it is {info.status.value}); {what} changed nothing",
        code="FLOW_NOT_ACTIVE",
        exit_code=EXIT_REQUEST_FAILED,
    )


async def health(conn: Connection, out: Printer) -> bool:
    """Print the server's health; return whether it is ok (not degraded)."""
    async with connect(conn) as client:
        result = await client.get_health()
    record = {
        "server": conn.server,
        "ok": bool(result.ok),
        "status": result.status,
        "reason": result.reason,
        "version": result.version,
        "store": result.store,
    }
    if out.json:
        out.emit_json(record)
    elif result.ok:
        out.line(f"{conn.server}: ok (server {result.version}, store {result.store})")
    else:
        out.line(f"{conn.server}: {result.status}: {result.reason} (server {result.version})")
    return bool(result.ok)


def show_version(out: Printer) -> None:
    from dex_server.cli import _print_version

    _print_version(out.json)
