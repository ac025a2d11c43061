"""Dex Web's time-travel dialog: the form, its parsing, and the earlier runs of a Flow ID.

The dialog runs the service's time travel (no Worker needed: the server plans the fork
from the committed history). Earlier runs are found by following ``previousRunId`` in the
first event (``TimeTravelFork`` or ``FlowContinued``) of each run, newest first.
"""

from __future__ import annotations

import datetime as dt
import json

from dex._protocol import TimeTravelRequest

from dex_server.engine.forks import FLOW_CONTINUED, TIME_TRAVEL_FORK
from dex_server.service._common import ServiceError
from dex_server.store import Tx
from dex_server.web._html import Safe, h, join, link, tag, when

FORK_TYPES = ("beginning", "history_event_time", "step_type", "step_execution_id")
STEP_METHODS = ("", "wait_for", "execute")
MAX_REASON_CHARS = 1000
# how many earlier runs the run page lists (the chain can be long after many forks)
MAX_EARLIER_RUNS = 20

_LABELS = {
    "beginning": "from the beginning (the start Step runs again)",
    "history_event_time": "after the last event at or before a time",
    "step_type": "at the latest execution of a Step type",
    "step_execution_id": "at a Step execution ID",
}
# the fields each fork point uses; any other filled field is refused, not ignored
_FIELDS = {
    "beginning": set(),
    "history_event_time": {"event_time"},
    "step_type": {"step_type", "step_method"},
    "step_execution_id": {"step_execution_id", "step_method"},
}


def _bad(message: str) -> ServiceError:
    return ServiceError("BAD_REQUEST", f"time travel: {message}")


def parse_time(text: str) -> float:
    """A time as typed: seconds since the epoch, or ISO 8601 (UTC when no offset is given).

    Also takes the run page's own format, ``2026-01-02 03:04:05 UTC``.
    """
    t = text.strip()
    try:
        return float(t)
    except ValueError:
        pass
    if t.endswith(" UTC"):
        t = t[:-4]
    try:
        parsed = dt.datetime.fromisoformat(t)
    except ValueError:
        raise _bad(
            f"{text!r} is not a time: give seconds since the epoch or ISO 8601,"
            " e.g. 2026-01-02T03:04:05Z"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return parsed.timestamp()


def parse_form(form: dict[str, str]) -> TimeTravelRequest:
    """The dialog's form as a time-travel request.

    Raises:
        ServiceError: ``BAD_REQUEST`` naming the field for an unknown fork point or step
            method, a missing field the fork point needs, a filled field it does not use,
            a time that does not parse, or a reason over ``MAX_REASON_CHARS``.
    """
    kind = form.get("type", "")
    if kind not in FORK_TYPES:
        raise _bad(f"unknown fork point {kind!r}; choose one of {', '.join(FORK_TYPES)}")
    values = {
        k: form.get(k, "").strip()
        for k in ("event_time", "step_type", "step_execution_id", "step_method")
    }
    extra = sorted(k for k, v in values.items() if v and k not in _FIELDS[kind])
    if extra:
        raise _bad(f"{', '.join(extra)} does not apply to the fork point {kind!r}")
    method = values["step_method"]
    if method not in STEP_METHODS:
        raise _bad(f"unknown step method {method!r}; choose wait_for or execute")
    needed = {
        "history_event_time": "event_time",
        "step_type": "step_type",
        "step_execution_id": "step_execution_id",
    }.get(kind)
    if needed and not values[needed]:
        raise _bad(f"the fork point {kind!r} needs {needed}")
    reason = form.get("reason", "").strip()
    if len(reason) > MAX_REASON_CHARS:
        raise _bad(f"the reason is over MAX_REASON_CHARS ({MAX_REASON_CHARS} characters)")
    return TimeTravelRequest(
        type=kind,  # type: ignore[arg-type]
        history_event_time=parse_time(values["event_time"]) if values["event_time"] else None,
        step_type=values["step_type"] or None,
        step_execution_id=values["step_execution_id"] or None,
        step_method=method or None,  # type: ignore[arg-type]
        reason=reason or None,
        skip_writes_reapply=form.get("skip_writes_reapply", "") == "on",
        rerun_single_attempt=form.get("rerun_single_attempt", "") == "on",
    )


def dialog(form: Safe) -> Safe:
    """The ``<details>`` dialog around ``form`` (built by the caller with the CSRF token)."""
    return Safe(f"<details id=time-travel-dialog><summary>Time travel…</summary>{form}</details>")


def dialog_body(flow_id: str) -> Safe:
    """The fields of the dialog's form."""
    choices = join(
        Safe(
            f'<label><input type=radio name=type value="{t}"'
            f"{' checked' if t == 'beginning' else ''}> {h(_LABELS[t])}</label><br>"
        )
        for t in FORK_TYPES
    )
    methods = join(Safe(f'<option value="{m}">{h(m or "default")}</option>') for m in STEP_METHODS)
    return Safe(
        f'<input type=hidden name=id value="{h(flow_id)}">'
        f"<fieldset><legend>Fork point</legend>{choices}"
        "<label>Event time <input name=event_time size=28"
        ' placeholder="2026-01-02 03:04:05 UTC"></label> '
        "<label>Step type <input name=step_type size=20></label> "
        "<label>Step execution ID <input name=step_execution_id size=20></label> "
        f"<label>Step method <select name=step_method>{methods}</select></label>"
        "</fieldset>"
        "<label><input type=checkbox name=skip_writes_reapply> Skip re-applying RPC writes"
        "</label><br>"
        "<label><input type=checkbox name=rerun_single_attempt> Rerun single-attempt Steps"
        "</label><br>"
        "<label>Reason <input name=reason size=50></label>"
        "<button type=submit>Time travel</button>"
        "<p>Makes a new run of this Flow from the state at the fork point; a running run"
        " is terminated, and the old run stays readable by its run ID. Steps after the fork"
        " point run again and the RPCs committed after it are re-applied (unless skipped)."
        " A single-attempt Step (one allowed attempt) whose outcome was committed is not"
        " run again: the new run takes its recorded outcome; one started with no outcome"
        " fails with OUTCOME_UNKNOWN. Tick “Rerun single-attempt Steps” to run them"
        " again. No Worker is needed to fork; one runs the new run's Steps.</p>"
    )


def earlier_runs(tx: Tx, flow_id: str, run_id: str) -> list[tuple[str, str, float, str]]:
    """The runs before ``run_id``, newest first: ``(run_id, status, started_at, how)``.

    ``how`` says how the newer run came from it (``time travel`` or ``continue-as-new``).
    Stops at a run gone past retention, or after ``MAX_EARLIER_RUNS``.
    """
    out: list[tuple[str, str, float, str]] = []
    current = run_id
    while len(out) < MAX_EARLIER_RUNS:
        first = tx.history.page(current, 0, 1)
        if not first or first[0][2] not in (TIME_TRAVEL_FORK, FLOW_CONTINUED):
            break
        how = "time travel" if first[0][2] == TIME_TRAVEL_FORK else "continue-as-new"
        prev = tx.flows.get(str(json.loads(first[0][3]).get("previousRunId", "")))
        if prev is None or prev.flow_id != flow_id or prev.run_id in {r[0] for r in out}:
            break
        out.append((prev.run_id, prev.status, prev.started_at, how))
        current = prev.run_id
    return out


def runs_section(flow_id: str, latest: str, runs: list[tuple[str, str, float, str]]) -> Safe:
    """The run page's list of this Flow's earlier runs (empty when there are none)."""
    if not runs:
        return Safe("")
    rows = join(
        Safe(
            f"<tr><td>{link('/ui/flow', run, id=flow_id, run=run)}</td><td>{h(status)}</td>"
            f"<td>{when(started)}</td><td>{h(how)}</td></tr>"
        )
        for run, status, started, how in runs
    )
    return Safe(
        "<section id=runs><h2>Runs of this Flow</h2>"
        "<table><tr><th>Run ID</th><th>Status</th><th>Started</th><th>Next run made by</th></tr>"
        f"<tr><td>{h(latest)} (latest)</td><td></td><td></td><td></td></tr>{rows}</table>"
        "</section>"
    )


def previous_run_link(event_type: str, payload: object, flow_id: str) -> Safe:
    """For a run's first event (``TimeTravelFork``/``FlowContinued``): a link to the run before."""
    if event_type not in (TIME_TRAVEL_FORK, FLOW_CONTINUED) or not isinstance(payload, dict):
        return Safe("")
    prev = payload.get("previousRunId")
    if not isinstance(prev, str) or not prev:
        return Safe("")
    return tag(
        "p", join(["Made from run ", link("/ui/flow", prev, id=flow_id, run=prev)]), class_="prev"
    )


def made_notice(flow_id: str, new_run: str, old_run: str) -> Safe:
    """What the page says after a time travel: links to the new and the old run."""
    return tag(
        "div",
        join(
            [
                "Time travel made the new run ",
                link("/ui/flow", new_run, id=flow_id),
                ". The earlier run ",
                link("/ui/flow", old_run, id=flow_id, run=old_run),
                " stays readable.",
            ]
        ),
        class_="notice",
        role="status",
        id="time-travel-notice",
    )
