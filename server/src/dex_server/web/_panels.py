"""Parts of Dex Web's pages that ``_routes`` assembles: timers, turns, tool calls, filters."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping
from typing import Any

from dex_server.engine import features
from dex_server.service._common import ServiceError
from dex_server.web import _reads
from dex_server.web._html import Safe, duration, h, join, json_block, link, tag, when

# the notes a session stores as user messages when a turn fails, is steered or cancelled
NOTE_PREFIX = "[Dex] The previous turn "


def countdown(deadline: float, now: float, *, until: bool = True) -> Safe:
    """Remaining time until ``deadline`` as text (rendered by the server, at page load)."""
    left = deadline - now
    if left <= 0:
        text, soon = "deadline passed", True
    else:
        text, soon = f"{duration(left)} left", left < 60
    return Safe(
        f'<span class="countdown{" soon" if soon else ""}" data-deadline="{deadline:.3f}">'
        f"{h(text)}</span>" + (f" (until {when(deadline)})" if until else "")
    )


def timers_panel(timers: list[_reads.TimerView], now: float) -> Safe:
    """The waiting Timers of a run with their fire times, soonest first."""
    rows = join(
        Safe(
            f"<tr><td>{h(t.execution_id)}</td><td>{h(t.step_type)}</td>"
            f"<td>{h(t.condition_id or '')}</td><td>{when(t.fire_at)}</td>"
            f"<td>{countdown(t.fire_at, now, until=False)}</td><td>{h(t.wait_mode)}</td></tr>"
        )
        for t in timers
    )
    empty = "" if timers else str(tag("p", "No Timers are waiting.", class_="empty"))
    return Safe(
        "<h3>Timers</h3><table id=timers><tr><th>Execution</th><th>Step type</th>"
        "<th>Condition</th><th>Fires at</th><th>Remaining</th><th>Wait mode</th></tr>"
        f"{rows}</table>{empty}"
    )


def parse_time(label: str, text: str) -> float | None:
    """A time filter's value: ISO 8601 (a time without an offset is UTC), or empty."""
    text = text.strip()
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace(" ", "T"))
    except ValueError:
        raise ServiceError(
            "BAD_REQUEST",
            f"{label}: {text!r} is not a date and time; use YYYY-MM-DDTHH:MM (UTC)"
            " or an ISO 8601 time with an offset",
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()


def time_input_value(ts: float | None) -> str:
    """A Unix time as a ``datetime-local`` input value (UTC)."""
    if ts is None:
        return ""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")


def is_note(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and str(message.get("text", "")).startswith(NOTE_PREFIX)


def note_label(message: dict[str, Any]) -> str:
    text = str(message.get("text", ""))
    if text.startswith(NOTE_PREFIX + "failed"):
        return "turn-failure note"
    if text.startswith(NOTE_PREFIX + "was steered"):
        return "steer note"
    if text.startswith(NOTE_PREFIX + "was cancel"):
        return "cancel note"
    return "turn note"


def usage_text(u: dict[str, Any]) -> str:
    """A usage record as one line of text."""
    return (
        f"{u.get('requests', 0)} requests, {u.get('input_tokens', 0)} in,"
        f" {u.get('output_tokens', 0)} out, {u.get('total_tokens', 0)} total"
    )


def _outcome(call: dict[str, Any]) -> str:
    return str(call.get("output") or call.get("error") or call.get("rejection_message") or "")


def _timing(call: dict[str, Any]) -> Safe:
    started, finished = call.get("started_at"), call.get("finished_at")
    if not isinstance(started, float | int) or not isinstance(finished, float | int):
        return Safe("")
    attempts = call.get("attempts")
    tries = f", attempt {attempts}" if isinstance(attempts, int) and attempts > 1 else ""
    return Safe(
        f"{when(started)} → {when(finished)}<br>"
        f"<span class=duration>{h(duration(finished - started))}{h(tries)}</span>"
    )


def tool_call_rows(calls: list[dict[str, Any]]) -> Safe:
    """Table rows of tool calls: tool, effect, policy, status, arguments, outcome, key, timing."""
    return join(
        Safe(
            f'<tr data-tool-call="{h(c.get("tool_call_id"))}"><td>{h(c.get("turn_id"))}</td>'
            f"<td>{h(c.get('tool_name'))}</td><td>{h(c.get('effect'))}</td>"
            f"<td>{'approval' if c.get('requires_approval') else 'automatic'}</td>"
            f"<td>{h(c.get('status'))}</td><td>{json_block(c.get('arguments'))}</td>"
            f"<td>{h(_outcome(c))}</td><td>{h(c.get('idempotency_key'))}</td>"
            f"<td class=timing>{_timing(c)}</td></tr>"
        )
        for c in calls
    )


def tool_calls_table(calls: list[dict[str, Any]], *, id_: str) -> Safe:
    return Safe(
        f"<table id={id_}><tr><th>Turn</th><th>Tool</th><th>Effect</th><th>Policy</th>"
        "<th>Status</th><th>Arguments</th><th>Outcome</th><th>Idempotency key</th>"
        f"<th>Timing</th></tr>{tool_call_rows(calls)}</table>"
    )


def turns_section(view: _reads.SessionView) -> Safe:
    """Usage per turn and in total, and every turn's tool calls (from the run's history)."""
    rows = join(
        Safe(
            f'<tr data-turn="{h(t.turn_id)}"><td>{h(t.turn_id)}</td>'
            f"<td>{h(usage_text(t.usage)) if t.usage else 'not reported'}</td>"
            f"<td>{h(len(t.tool_calls))}</td></tr>"
        )
        for t in view.turns
    )
    total = Safe(
        f"<tr class=total><th>Session total</th><td>{h(usage_text(view.usage))}</td>"
        f"<td>{h(sum(len(t.tool_calls) for t in view.turns))}</td></tr>"
    )
    calls = [
        c
        for t in view.turns
        for c in sorted(t.tool_calls.values(), key=lambda c: int(c.get("deferral_order", 0)))
    ]
    more = (
        str(tag("p", "Turns are read from the first part of a long history only.", class_="notice"))
        if view.turns_truncated
        else ""
    )
    return Safe(
        "<section id=turns><h2>Turns</h2>"
        "<table id=turn-usage><tr><th>Turn</th><th>Usage</th><th>Tool calls</th></tr>"
        f"{rows}{total}</table>{more}"
        "<h3>Tool calls of every turn</h3>"
        "<p>Timing is that of the Step execution that ran the tool (its final attempt)."
        " Calls that never ran (rejected, cancelled) have none.</p>"
        f"{tool_calls_table(calls, id_='all-tool-calls')}</section>"
    )


def with_timing(view: _reads.SessionView) -> list[dict[str, Any]]:
    """The active turn's tool call records, with the timing the history knows of them."""
    known: dict[tuple[str, str], dict[str, Any]] = {
        (t.turn_id, cid): c for t in view.turns for cid, c in t.tool_calls.items()
    }
    out: list[dict[str, Any]] = []
    for c in view.tool_calls:
        none: dict[str, Any] = {}
        past = known.get((str(c.get("turn_id")), str(c.get("tool_call_id"))), none)
        keys: tuple[str, ...] = ("started_at", "finished_at", "attempts")
        timing: dict[str, Any] = {k: past[k] for k in keys if k in past}
        out.append({**c, **timing})
    return out


def turn_controls_text() -> Safe:
    return Safe(
        "<p>Steer: the running turn ends at its next safe Step boundary (what ran stays"
        " recorded and the model gets a note about it; calls waiting for approval are"
        " cancelled) and a new turn starts with this text. With no turn running, the text"
        " starts the next turn. Cancel: the running turn stops (a model call is dropped,"
        " started tool calls finish) and no turn starts until the next message.</p>"
    )


def blob_links(payload: object, flow_id: str, event_id: int, run: str = "") -> Safe:
    """Links to the values an event keeps apart (stored as blobs), loaded on demand."""
    ids = _reads.blob_ids(payload)
    if not ids:
        return Safe("")
    links = join(
        Safe(
            "<li>"
            + link(
                "/ui/flow/event",
                f"Load the value stored apart ({b[:12]}…)",
                id=flow_id,
                event=event_id,
                blob=b,
                run=run,
            )
            + "</li>"
        )
        for b in ids
    )
    return Safe(f"<ul class=large-value>{links}</ul>")


def time_filters(after_text: str, before_text: str) -> Safe:
    return Safe(
        "<label>Started after (UTC) <input type=datetime-local step=1 name=started_after"
        f' value="{h(after_text)}"></label>'
        "<label>Started before (UTC) <input type=datetime-local step=1 name=started_before"
        f' value="{h(before_text)}"></label>'
    )


def search_hook(query: str) -> Safe:
    """The search-by-Attributes input: shown only when this server runs Flow search."""
    if features.SEARCH not in features.SERVER_FEATURES:
        return Safe("")
    return Safe(
        '<label class=search>Search <input name=query size=40 value="'
        f'{h(query)}" placeholder="indexed Attributes, e.g. Region = \'eu\'"></label>'
    )


def query_error(query: str, message: str, position: int) -> Safe:
    """A query's parse error: the parser's message and the query with a caret under the token."""
    line_start = query.rfind("\n", 0, position) + 1
    line_end = query.find("\n", position)
    line = query[line_start : line_end if line_end >= 0 else len(query)]
    caret = " " * (position - line_start) + "^"
    return join(
        [
            tag("div", f"Not searched: {message}.", class_="error", role="status"),
            tag("pre", f"{line}\n{caret}", class_="query-error", id="query-error"),
        ]
    )


def indexed_cell(attrs: Mapping[str, Any]) -> Safe:
    """A search result's indexed Attribute values, one ``key = JSON`` line each (escaped)."""
    lines = [
        tag("div", f"{key} = {json.dumps(attrs[key], ensure_ascii=False)}", data_key=key)
        for key in sorted(attrs)
    ]
    return join(lines)
