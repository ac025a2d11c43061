"""Dex Web's routes: translate HTTP to service calls and render pages (like ``api/``)."""

from __future__ import annotations

import contextvars
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, get_args
from urllib.parse import parse_qsl, urlencode

from dex._protocol import ErrorCode, InvokeRpcRequest, SearchFlowsResponse, StopFlowRequest
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route, Router
from starlette.types import ASGIApp, Receive, Scope, Send

from dex_server.engine import features
from dex_server.engine.query import QueryError, listing_conditions, parse_query, with_conditions
from dex_server.service import Runtime, _flows
from dex_server.service._common import ServiceError
from dex_server.service._search import search_fields, search_flows
from dex_server.store import StoreUnavailableError
from dex_server.store._records import FlowStatus
from dex_server.web import _graph, _panels, _reads, _timetravel
from dex_server.web._html import (
    CSS,
    Safe,
    h,
    join,
    json_block,
    layout,
    link,
    tag,
    value_block,
    when,
)
from dex_server.web._live import Live
from dex_server.web._security import WebSecurity, set_cookie_header

_STATUSES: tuple[str, ...] = get_args(FlowStatus)
_STOP_TYPES = ("cancel", "terminate", "fail")
_FORM_LIMIT = 256 * 1024
_PAGE_SIZE = 50
_HISTORY_PAGE = 100
_REMOTE_RPC_TIMEOUT_S = 5.0
_HEADERS = {
    # only Dex Web's own script file runs (no inline script): defence behind the escaping
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'self';"
        " img-src 'self'; form-action 'self';"
        " frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


@dataclass
class Ctx:
    """The browser session of a request."""

    nonce: str
    csrf: str

    def form(self, action: str, body: object, *, class_: str | None = None) -> Safe:
        hidden = tag("input", type="hidden", name="csrf", value=self.csrf)
        return Safe(
            f'<form method=post action="{h(action)}"'
            f"{f' class={chr(34)}{h(class_)}{chr(34)}' if class_ else ''}>{hidden}{h(body)}</form>"
        )


# the signed-in session of the request being rendered (set by WebUI's guard)
_SIGN_OUT: contextvars.ContextVar[Safe | None] = contextvars.ContextVar("sign_out", default=None)


def _page(title: str, body: object, status: int = 200, *, signed_in: bool = True) -> Response:
    return Response(
        layout(title, body, signed_in=signed_in, sign_out=_SIGN_OUT.get() if signed_in else None),
        status_code=status,
        media_type="text/html; charset=utf-8",
        headers=_HEADERS,
    )


def _notice(text: object, *, error: bool = False) -> Safe:
    return tag("div", text, class_="error" if error else "notice", role="status")


def _kv(label: str, value: object) -> Safe:
    return Safe(f"<tr><th>{h(label)}</th><td>{h(value)}</td></tr>")


def _status(status: str, id_: str | None = None) -> Safe:
    return tag("span", status, class_=f"status status-{status}", id=id_)


def _empty(text: str) -> Safe:
    return tag("p", text, class_="empty")


async def _form(request: Request) -> dict[str, str]:
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > _FORM_LIMIT:
            raise ServiceError("LIMIT_EXCEEDED", "the form is too large")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


Page = Callable[[Request, Ctx], Awaitable[Response]]


class _Notices:
    """What a form action that changed something says, kept for the page it redirects to.

    An action answers with a redirect to the page to show (Post/Redirect/Get), so reloading
    that page reads it again instead of sending the action a second time. The redirect
    carries a random token; the page shows the notice while the token is kept (the live
    script refreshes parts of the page from the same address). At most ``_MAX_NOTICES``
    are kept, each for ``_NOTICE_TTL_S`` seconds.
    """

    def __init__(self) -> None:
        self._kept: dict[str, tuple[float, Safe]] = {}

    def put(self, notice: Safe) -> str:
        now = time.monotonic()
        for token in [t for t, (at, _) in self._kept.items() if now - at > _NOTICE_TTL_S]:
            del self._kept[token]
        while len(self._kept) >= _MAX_NOTICES:
            del self._kept[next(iter(self._kept))]
        token = secrets.token_urlsafe(12)
        self._kept[token] = (now, notice)
        return token

    def get(self, token: str) -> Safe | None:
        kept = self._kept.get(token) if token else None
        if kept is None or time.monotonic() - kept[0] > _NOTICE_TTL_S:
            return None
        return kept[1]


_MAX_NOTICES = 1000
_NOTICE_TTL_S = 60.0


class WebUI:
    """The Dex Web ASGI application of one server (mounted by :class:`WebMount`)."""

    def __init__(self, runtime: Runtime, token: str | None) -> None:
        self.runtime = runtime
        self.security = WebSecurity(token)
        self.router = Router(routes=self._routes(), default=self._not_found)
        self._notices = _Notices()

    def _done(self, path: str, notice: Safe, **query: str) -> Response:
        """Answer an action that went through: a redirect to ``path`` showing ``notice``."""
        query["notice"] = self._notices.put(notice)
        return RedirectResponse(f"{path}?{urlencode(query)}", status_code=303, headers=_HEADERS)

    def _flash(self, request: Request, notice: Safe | None) -> Safe | None:
        return (
            notice
            if notice is not None
            else self._notices.get(request.query_params.get("notice", ""))
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.router(scope, receive, send)

    async def _not_found(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Starlette's default raises an HTTPException that nothing here turns into a page.
        text = "Dex Web has no page at this address: see Flows, Agent sessions or Approvals."
        response = _page("Not found", _notice(text, error=True), 404, signed_in=False)
        await response(scope, receive, send)

    # ----------------------------------------------------------------- plumbing

    def _guarded(self, fn: Page, *, post: bool = False) -> Callable[[Request], Awaitable[Response]]:
        sec = self.security

        async def wrapped(request: Request) -> Response:
            nonce = sec.session_of(request)
            new_cookie: str | None = None
            if nonce is None and not post:
                if sec.token is not None:
                    return RedirectResponse("/ui/login", status_code=303, headers=_HEADERS)
                nonce, new_cookie = sec.new_session()
            try:
                if post:
                    form = await _form(request)
                    why = sec.refusal(request, nonce, form)
                    if why is not None:
                        return _page("Refused", _notice(f"Refused: {why}.", error=True), 403)
                    request.state.form = form
                assert nonce is not None
                ctx = Ctx(nonce, sec.csrf_token(nonce))
                if sec.token is not None:
                    _SIGN_OUT.set(ctx.form("/ui/logout", Safe("<button>Sign out</button>")))
                response = await fn(request, ctx)
            except ServiceError as err:
                response = _page("Error", _notice(f"{err.code}: {err.message}", error=True), 400)
            except StoreUnavailableError as exc:
                response = _page(
                    "Unavailable", _notice(f"store unavailable: {exc}", error=True), 503
                )
            if new_cookie is not None:
                response.headers.append(
                    "set-cookie",
                    set_cookie_header(new_cookie, secure=request.url.scheme == "https"),
                )
            return response

        return wrapped

    def _routes(self) -> list[Route]:
        g = self._guarded

        async def root(request: Request) -> Response:
            return RedirectResponse("/ui/flows", status_code=303)

        async def css(request: Request) -> Response:
            return Response(CSS, media_type="text/css", headers={"cache-control": "max-age=300"})

        return [
            Route("/", root),
            Route("/ui", root),
            Route("/ui/", root),
            Route("/ui/static/dex-web.css", css),
            Route("/ui/login", self._login_form, methods=["GET"]),
            Route("/ui/login", self._login, methods=["POST"]),
            Route("/ui/logout", g(self._logout, post=True), methods=["POST"]),
            Route("/ui/flows", g(self._flows), methods=["GET"]),
            Route("/ui/flow", g(self._flow), methods=["GET"]),
            Route("/ui/flow/stop", g(self._stop, post=True), methods=["POST"]),
            Route("/ui/flow/time-travel", g(self._time_travel, post=True), methods=["POST"]),
            Route("/ui/flow/value", g(self._flow_value), methods=["GET"]),
            Route("/ui/flow/event", g(self._flow_event), methods=["GET"]),
            Route("/ui/sessions", g(self._sessions), methods=["GET"]),
            Route("/ui/session", g(self._session), methods=["GET"]),
            Route("/ui/session/message", g(self._send_message, post=True), methods=["POST"]),
            Route("/ui/approvals", g(self._approvals), methods=["GET"]),
            Route("/ui/approvals/resolve", g(self._resolve, post=True), methods=["POST"]),
            Route("/ui/session/steer", g(self._steer, post=True), methods=["POST"]),
            Route("/ui/session/cancel", g(self._cancel_turn, post=True), methods=["POST"]),
            *Live(self.runtime).routes(g),
        ]

    async def _read(self, job: Callable[[Any], Any]) -> Any:
        # committed state from the store's readers: no Worker, and off the writer
        return await self.runtime.store.read(job)

    async def _rpc(self, flow_id: str, rpc_name: str, value: object) -> tuple[bool, object]:
        """Invoke an RPC; ``(True, output)`` or ``(False, what the person should know)``."""
        rt = self.runtime
        info = await self._read(lambda tx: _flows.describe(tx, flow_id))
        no_worker = (
            f"No Worker serves Flow type {info.flow_type!r} right now, so {rpc_name} was not"
            " run and nothing changed. Start (or restart) a Worker for it and try again;"
            " this page keeps showing the committed state meanwhile."
        )
        local = rt.dispatcher.serves(info.flow_type)
        if not local and not rt.shared:
            return False, no_worker
        # with several servers a Worker may be connected to another one: give it a moment
        timeout = None if local else _REMOTE_RPC_TIMEOUT_S
        try:
            out = await rt.invoke_rpc(
                flow_id,
                InvokeRpcRequest(
                    rpc_name=rpc_name,
                    input=None if value is None else _reads.encode_json(value),
                    timeout_s=timeout,
                ),
            )
        except ServiceError as err:
            if err.code == ErrorCode.NO_WORKER_AVAILABLE:
                return False, no_worker
            return False, f"{rpc_name} failed: {err.code}: {err.message}"
        return True, json.loads(bytes(out)) if out is not None else None

    # ------------------------------------------------------------------- login

    async def _login_form(self, request: Request, message: str = "", status: int = 200) -> Response:
        if self.security.token is None:
            return RedirectResponse("/ui/flows", status_code=303)
        body = Safe(
            (str(_notice(message, error=True)) if message else "")
            + '<form method=post action="/ui/login"><label>Server token '
            "<input type=password name=token autocomplete=current-password required autofocus>"
            "</label><button type=submit>Sign in</button></form>"
            "<p>The token is the one the server was started with (<code>--token-file</code>"
            " or <code>DEX_SERVER_TOKEN</code>). It is asked once per browser session.</p>"
        )
        return _page("Sign in", body, status, signed_in=False)

    async def _login(self, request: Request) -> Response:
        sec = self.security
        form = await _form(request)
        origin = request.headers.get("origin")
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none") or (
            origin is not None and origin != f"{request.url.scheme}://{request.headers.get('host')}"
        ):
            return _page(
                "Refused",
                _notice("Refused: sign in from this server's page.", error=True),
                403,
                signed_in=False,
            )
        if not sec.check_token(form.get("token", "")):
            return await self._login_form(request, "That is not the server's token.", 401)
        _, cookie = sec.new_session()
        response = RedirectResponse("/ui/flows", status_code=303, headers=_HEADERS)
        response.headers.append(
            "set-cookie", set_cookie_header(cookie, secure=request.url.scheme == "https")
        )
        return response

    async def _logout(self, request: Request, ctx: Ctx) -> Response:
        response = RedirectResponse("/ui/login", status_code=303, headers=_HEADERS)
        response.headers.append(
            "set-cookie", "dex_web_session=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict"
        )
        return response

    # ------------------------------------------------------------------- Flows

    async def _flows(self, request: Request, ctx: Ctx) -> Response:
        q = request.query_params
        status = q.get("status") or None
        if status is not None and status not in _STATUSES:
            raise ServiceError("BAD_REQUEST", f"unknown status {status!r}")
        flow_type = q.get("flow_type") or None
        prefix = q.get("prefix", "")
        before = q.get("page_token") or None
        after_text, before_text = q.get("started_after", ""), q.get("started_before", "")
        problem: Safe | None = None
        try:
            started_after = _panels.parse_time("Started after", after_text)
            started_before = _panels.parse_time("Started before", before_text)
            if started_after is not None and started_before is not None:
                if started_after >= started_before:
                    raise ServiceError(
                        "BAD_REQUEST", "Started after must be earlier than Started before"
                    )
        except ServiceError as err:
            # a bad filter runs no query: the form comes back with the message
            problem = _notice(f"Not filtered: {err.message}.", error=True)
            started_after = started_before = None
        query = q.get("query", "")
        searching = bool(query.strip()) and features.SEARCH in features.SERVER_FEATURES
        flows: list[Any] = []
        indexed: list[dict[str, Any]] = []
        nxt: str | None = None
        if problem is None and searching:
            text = with_conditions(
                query,
                listing_conditions(
                    status=status,
                    flow_type=flow_type,
                    flow_id_prefix=prefix,
                    started_after=started_after,
                    started_before=started_before,
                ),
            )

            def run_search(tx: Any) -> SearchFlowsResponse:
                # parse the person's text alone first, so an error's position is theirs
                parse_query(query, search_fields(tx))
                return search_flows(tx, text, _PAGE_SIZE, before or "", True)

            try:
                found: SearchFlowsResponse = await self._read(run_search)
            except QueryError as err:
                problem = _panels.query_error(query, str(err), err.position)
            except ServiceError as err:
                if err.code != ErrorCode.BAD_REQUEST:
                    raise
                problem = _notice(f"Not searched: {err.message}.", error=True)
            else:
                flows, nxt = list(found.flows), found.next_page_token
                indexed = [dict(f.indexed_attributes) for f in found.flows]
        elif problem is None:
            flows, nxt = await self._read(
                lambda tx: _reads.list_flows(
                    tx,
                    status=status,
                    flow_type=flow_type,
                    prefix=prefix,
                    size=_PAGE_SIZE,
                    before=before,
                    started_after=started_after,
                    started_before=started_before,
                )
            )
        options = join(
            tag("option", s or "any status", value=s, selected="" if s == (status or "") else None)
            for s in ("", *_STATUSES)
        )
        filters = Safe(
            '<form method=get action="/ui/flows" class=filters>'
            f"<label>Status <select name=status>{options}</select></label>"
            f'<label>Flow type <input name=flow_type value="{h(flow_type or "")}"></label>'
            f'<label>ID prefix <input name=prefix value="{h(prefix)}"></label>'
            f"{_panels.time_filters(after_text, before_text)}"
            f"{_panels.search_hook(q.get('query', ''))}"
            "<button type=submit>Filter</button></form>"
        )
        rows = join(
            Safe(
                "<tr>"
                f"<td>{link('/ui/flow', f.flow_id, id=f.flow_id)}</td><td>{h(f.flow_type)}</td>"
                f"<td>{tag('span', f.status, class_=f'status status-{f.status}')}</td>"
                f"<td>{when(f.started_at)}</td><td>{when(f.closed_at)}</td>"
                + (
                    f"<td class=indexed>{_panels.indexed_cell(indexed[i])}</td>"
                    if searching
                    else ""
                )
                + "</tr>"
            )
            for i, f in enumerate(flows)
        )
        table = Safe(
            "<table id=flows><thead><tr><th>Flow ID</th><th>Flow type</th><th>Status</th>"
            "<th>Started</th><th>Closed</th>"
            + ("<th>Indexed Attributes</th>" if searching else "")
            + f"</tr></thead><tbody>{rows}</tbody></table>"
        )
        empty = _empty("No Flows match.") if not flows and problem is None else Safe("")
        more = (
            link(
                "/ui/flows",
                "Next page",
                status=status,
                flow_type=flow_type,
                prefix=prefix,
                started_after=after_text,
                started_before=before_text,
                query=query if searching else None,
                page_token=nxt,
            )
            if nxt
            else Safe("")
        )
        return _page(
            "Flows",
            join([filters, problem or "", table, empty, more]),
            400 if problem is not None else 200,
        )

    async def _flow(
        self, request: Request, ctx: Ctx, notice: Safe | None = None, status: int = 200
    ) -> Response:
        notice = self._flash(request, notice)
        fid = request.query_params.get("id", "")
        after = request.query_params.get("after", "")
        if request.query_params.get("run", ""):
            return await self._earlier_run(request, ctx)
        running = dict(self.runtime.dispatcher.running)
        specs = self.runtime.specs
        view: _reads.FlowView = await self._read(
            lambda tx: _reads.flow_view(tx, specs, fid, running, after, _HISTORY_PAGE)
        )
        info = view.state.info
        parts: list[object] = [notice or ""]
        summary = Safe(
            "<table class=summary>"
            f"<tr><th>Flow ID</th><td>{h(info.flow_id)}</td></tr>"
            f"<tr><th>Run ID</th><td>{h(info.run_id)}</td></tr>"
            f"<tr><th>Flow type</th><td>{h(info.flow_type)}</td></tr>"
            f"<tr><th>Status</th><td>{_status(info.status, 'flow-status')}</td></tr>"
            f"<tr><th>Started</th><td>{when(info.started_at)}</td></tr>"
            f"<tr><th>Closed</th><td>{when(info.closed_at)}</td></tr>"
            + (
                str(_kv("Error", f"{view.error_type or ''}: {view.error_message or ''}"))
                if view.error_type or view.error_message
                else ""
            )
            + "</table>"
        )
        parts.append(summary)
        if _reads.is_agent_session(view.spec):
            parts.append(
                tag("p", link("/ui/session", "Open the conversation view", id=info.flow_id))
            )
        if info.status == "running":
            parts.append(self._stop_dialog(ctx, info.flow_id))
        parts.append(
            _timetravel.dialog(
                ctx.form("/ui/flow/time-travel", _timetravel.dialog_body(info.flow_id))
            )
        )
        earlier = await self._read(
            lambda tx: _timetravel.earlier_runs(tx, info.flow_id, info.run_id)
        )
        parts.append(_timetravel.runs_section(info.flow_id, info.run_id, earlier))
        if view.graph is not None:
            parts.append(_graph.render(view.graph))
        parts.append(self._state_panel(view))
        parts.append(self._timeline(view, info.flow_id))
        return _page(f"Flow {info.flow_id}", join(parts), status)

    def _stop_dialog(self, ctx: Ctx, flow_id: str) -> Safe:
        choices = join(
            Safe(
                f'<label><input type=radio name=type value="{t}"'
                f"{' checked' if t == 'cancel' else ''}> {t}</label>"
            )
            for t in _STOP_TYPES
        )
        body = Safe(
            f'<input type=hidden name=id value="{h(flow_id)}">'
            f"<fieldset><legend>How</legend>{choices}</fieldset>"
            "<label>Reason <input name=reason size=50></label>"
            "<button type=submit>Stop the Flow</button>"
            "<p>cancel: the Flow ends as canceled; terminate: it ends at once as terminated;"
            " fail: it ends as failed with the reason as its error. Running Steps are"
            " cancelled either way.</p>"
        )
        return Safe(
            "<details id=stop-dialog><summary>Stop…</summary>"
            f"{ctx.form('/ui/flow/stop', body)}</details>"
        )

    def _state_panel(self, view: _reads.FlowView) -> Safe:
        fid = view.state.info.flow_id
        attrs = join(
            Safe(
                f'<tr data-name="{h(n)}"><td>{h(n)}</td>'
                f"<td>{value_block(v, '/ui/flow/value', id=fid, name=n)}</td></tr>"
            )
            for n, v in view.attributes.items()
        )
        pending = join(
            Safe(
                f"<tr><td>{h(m.channel)}</td><td>{h(m.message_id)}</td><td>"
                f"{value_block(bytes(m.value), '/ui/flow/value', id=fid, message=m.message_id)}"
                "</td></tr>"
            )
            for m in view.pending
        )
        steps = join(
            Safe(
                f"<tr><td>{h(s.step_execution_id)}</td><td>{h(s.step_type)}</td><td>{h(s.phase)}</td>"
                f"<td>{h(s.attempt)}</td><td>"
                + (
                    f"{h(s.last_failure.error_type)}: {h(s.last_failure.message)}"
                    + (str(tag("pre", s.last_failure.stack)) if s.last_failure.stack else "")
                    if s.last_failure
                    else ""
                )
                + "</td></tr>"
            )
            for s in view.state.active_steps
        )
        return Safe(
            "<section id=state><h2>State</h2><h3>Attributes</h3>"
            f"<table id=attributes><tr><th>Name</th><th>Value</th></tr>{attrs}</table>"
            "<h3>Channels: pending messages</h3>"
            "<table id=channels><tr><th>Channel</th><th>Message ID</th><th>Value</th></tr>"
            f"{pending}</table>"
            f"{_panels.timers_panel(view.timers, time.time())}"
            "<h3>Active executions</h3>"
            "<table id=executions><tr><th>Execution</th><th>Step type</th><th>Phase</th>"
            f"<th>Attempt</th><th>Last failure</th></tr>{steps}</table></section>"
        )

    def _timeline(self, view: _reads.FlowView, flow_id: str) -> Safe:
        assert view.history is not None
        return self._events(view.history, flow_id)

    def _events(self, history: Any, flow_id: str, run: str = "") -> Safe:
        items = []
        for e in history.events:
            raw = bytes(e.payload)
            try:
                payload = json.loads(raw)
            except ValueError:
                payload = None
            details = ""
            if isinstance(payload, dict):
                details = ", ".join(
                    f"{k}={v}"
                    for k, v in payload.items()
                    if isinstance(v, str | int | float | bool) and len(str(v)) <= 80
                )
            eid = int(e.event_id)
            items.append(
                Safe(
                    f"<li id=event-{int(e.event_id)}><details><summary>#{int(e.event_id)} "
                    f"{when(e.event_time)} <strong>{h(e.type)}</strong> {h(details)}</summary>"
                    f"{value_block(raw, '/ui/flow/event', id=flow_id, event=eid, run=run)}"
                    f"{_panels.blob_links(payload, flow_id, int(e.event_id), run)}"
                    f"{_timetravel.previous_run_link(e.type, payload, flow_id)}</details></li>"
                )
            )
        nxt = history.next_page_token
        more = link("/ui/flow", "Later events", id=flow_id, after=nxt, run=run) if nxt else Safe("")
        return Safe(f"<section id=timeline><h2>History</h2><ol>{join(items)}</ol>{more}</section>")

    async def _flow_value(self, request: Request, ctx: Ctx) -> Response:
        """One whole Attribute value (``name``) or pending message (``message``), escaped."""
        q = request.query_params
        fid, name, message = q.get("id", ""), q.get("name", ""), q.get("message", "")
        specs = self.runtime.specs
        if name:
            raw = await self._read(lambda tx: _reads.attribute_value(tx, fid, name))
            what = f"Attribute {name}"
        elif message:
            raw = await self._read(lambda tx: _reads.message_value(tx, specs, fid, message))
            what = f"message {message}"
        else:
            raise ServiceError("BAD_REQUEST", "name an Attribute (name=) or a message (message=)")
        if raw is None:
            return _page("Not found", _notice(f"Flow {fid} has no {what} now.", error=True), 404)
        back = tag("p", link("/ui/flow", f"Back to Flow {fid}", id=fid))
        return _page(f"{what} of {fid}", join([back, json_block(raw)]))

    async def _flow_event(self, request: Request, ctx: Ctx) -> Response:
        """One history event's whole raw JSON, escaped."""
        fid = request.query_params.get("id", "")
        text = request.query_params.get("event", "")
        if not text.isdigit():
            raise ServiceError("BAD_REQUEST", f"event must be an event number, not {text!r}")
        run = request.query_params.get("run", "")
        found = await self._read(lambda tx: _reads.event_payload(tx, fid, int(text), run))
        if found is None:
            return _page("Not found", _notice(f"Flow {fid} has no event #{text}.", error=True), 404)
        blob = request.query_params.get("blob", "")
        back = tag("p", link("/ui/flow", f"Back to Flow {fid}", id=fid))
        if blob:
            data = await self._read(lambda tx: _reads.event_blob(tx, fid, int(text), blob, run))
            if data is None:
                return _page(
                    "Not found",
                    _notice(f"Event #{text} of Flow {fid} refers to no value {blob}.", error=True),
                    404,
                )
            return _page(
                f"A value of event #{text} ({found[0]}) of {fid}", join([back, json_block(data)])
            )
        return _page(f"Event #{text} ({found[0]}) of {fid}", join([back, json_block(found[1])]))

    async def _stop(self, request: Request, ctx: Ctx) -> Response:
        form: dict[str, str] = request.state.form
        fid = form.get("id", "")
        kind = form.get("type", "cancel")
        if kind not in _STOP_TYPES:
            raise ServiceError("BAD_REQUEST", f"unknown stop type {kind!r}")
        reason = form.get("reason") or None
        try:
            await self.runtime.stop_flow(fid, StopFlowRequest(type=kind, reason=reason))  # type: ignore[arg-type]
        except ServiceError as err:
            return await self._flow(
                _with_query(request, id=fid),
                ctx,
                _notice(f"Not stopped: {err.message}", error=True),
                409,
            )
        return self._done("/ui/flow", _notice(f"Flow stopped ({kind})."), id=fid)

    async def _earlier_run(self, request: Request, ctx: Ctx) -> Response:
        """One run of a Flow ID by its run ID: its summary and history (read-only)."""
        q = request.query_params
        fid, run, after = q.get("id", ""), q.get("run", ""), q.get("after", "")

        def read(tx: Any) -> tuple[Any, Any, Any]:
            flow = _flows.require_flow(tx, fid, run)
            latest = _flows.require_flow(tx, fid)
            return flow, latest, _flows.history_page(tx, fid, run, _HISTORY_PAGE, after)

        flow, latest, history = await self._read(read)
        note = (
            "This is the latest run."
            if latest.run_id == flow.run_id
            else "This is an earlier run, kept read-only; the Flow's latest run is "
        )
        summary = Safe(
            f"<p class=notice id=earlier-run>{h(note)}"
            f"{link('/ui/flow', latest.run_id, id=fid) if latest.run_id != flow.run_id else ''}"
            "</p><table class=summary>"
            f"{_kv('Flow ID', fid)}{_kv('Run ID', flow.run_id)}{_kv('Flow type', flow.flow_type)}"
            f"<tr><th>Status</th><td>{_status(flow.status, 'flow-status')}</td></tr>"
            f"<tr><th>Started</th><td>{when(flow.started_at)}</td></tr>"
            f"<tr><th>Closed</th><td>{when(flow.closed_at)}</td></tr></table>"
        )
        return _page(
            f"Run {flow.run_id} of {fid}", join([summary, self._events(history, fid, run)])
        )

    async def _time_travel(self, request: Request, ctx: Ctx) -> Response:
        form: dict[str, str] = request.state.form
        fid = form.get("id", "")
        back = _with_query(request, id=fid)
        try:
            req = _timetravel.parse_form(form)
            old = (await self._read(lambda tx: _flows.describe(tx, fid))).run_id
            new = await self.runtime.time_travel(fid, req)
        except ServiceError as err:
            return await self._flow(
                back, ctx, _notice(f"No time travel: {err.message}", error=True), 400
            )
        return self._done("/ui/flow", _timetravel.made_notice(fid, new, old), id=fid)

    # ---------------------------------------------------------- agent sessions

    async def _sessions(self, request: Request, ctx: Ctx) -> Response:
        specs = self.runtime.specs
        rows: list[_reads.SessionSummary] = await self._read(lambda tx: _reads.sessions(tx, specs))
        body = join(
            Safe(
                f"<tr><td>{link('/ui/session', s.flow.flow_id, id=s.flow.flow_id)}</td>"
                f"<td>{h(s.flow.flow_type)}</td><td>{h(s.flow.status)}</td><td>{h(s.status)}</td>"
                f"<td>{h(s.approvals)}</td><td>{h(s.questions)}</td>"
                f"<td>{h(s.turn_count)}</td><td>{h(s.message_count)}</td>"
                f"<td>{when(s.flow.started_at)}</td></tr>"
            )
            for s in rows
        )
        table = Safe(
            "<table id=sessions><tr><th>Session</th><th>Flow type</th><th>Flow status</th>"
            "<th>Session status</th><th>Approvals waiting</th><th>Questions waiting</th>"
            "<th>Turns</th><th>Messages</th>"
            f"<th>Started</th></tr>{body}</table>"
        )
        return _page(
            "Agent sessions", join([table, _empty("No agent sessions.") if not rows else ""])
        )

    async def _approvals(
        self, request: Request, ctx: Ctx, notice: Safe | None = None, status: int = 200
    ) -> Response:
        notice = self._flash(request, notice)
        specs = self.runtime.specs
        items: list[_reads.Approval] = await self._read(lambda tx: _reads.approvals(tx, specs))
        now = time.time()
        cards = []
        for a in items:
            left = _panels.countdown(a.deadline, now) if a.deadline is not None else "no deadline"
            if a.kind == "question":
                cards.append(_question_card(ctx, a, left))
                continue
            form = ctx.form(
                "/ui/approvals/resolve",
                Safe(
                    f'<input type=hidden name=id value="{h(a.flow_id)}">'
                    f'<input type=hidden name=interrupt_id value="{h(a.interrupt_id)}">'
                    f'<input type=hidden name=original value="{h(a.arguments)}">'
                    "<label>Edit arguments <textarea name=arguments rows=3 cols=60>"
                    f"{h(a.arguments)}</textarea></label> "
                    "<label>Approver <input name=approver size=20></label> "
                    "<button type=submit name=decision value=approve>Approve</button> "
                    "<label>Reason <input name=reason size=40></label>"
                    "<button type=submit name=decision value=reject>Reject</button>"
                ),
            )
            session = link("/ui/session", a.flow_id, id=a.flow_id)
            cards.append(
                Safe(
                    f'<section class=approval data-interrupt="{h(a.interrupt_id)}">'
                    f"<h3>{h(a.tool_name)} <small>in {session}</small></h3>"
                    f"<p>Effect: <strong>{h(a.effect or 'unknown')}</strong>"
                    f" · raised {when(a.created_at)}"
                    f" · deadline: {h(left)}</p>"
                    f"{json_block(a.arguments)}{form}</section>"
                )
            )
        intro = tag(
            "p",
            "Each call waits for one answer. If two people answer the same approval, the first"
            " answer the session commits wins; the second is told the approval is no longer"
            " pending and changes nothing.",
        )
        empty = _empty("No approvals are waiting.") if not items else Safe("")
        return _page("Approvals", join([notice or "", intro, empty, *cards]), status)

    async def _resolve(self, request: Request, ctx: Ctx) -> Response:
        form: dict[str, str] = request.state.form
        if form.get("kind") == "question":
            return await self._answer(request, ctx, form)
        approved = form.get("decision") == "approve"
        reason = form.get("reason", "").strip() or None
        edited = _edited_arguments(form) if approved else None
        if isinstance(edited, Safe):
            return await self._approvals(request, ctx, edited, 400)
        ok, out = await self._rpc(
            form.get("id", ""),
            "resolve_interrupt",
            {
                "interrupt_id": form.get("interrupt_id", ""),
                "approved": approved,
                "rejection_message": None if approved else reason,
                "arguments": edited,
                "approver": form.get("approver", "").strip() or None,
            },
        )
        if not ok:
            return await self._approvals(request, ctx, _notice(out, error=True), 503)
        if out is not True:
            return await self._approvals(
                request,
                ctx,
                _notice(
                    "That approval is no longer pending (already answered, or its deadline"
                    " passed); nothing changed.",
                    error=True,
                ),
                409,
            )
        verdict = (
            "Approved" if approved else "Rejected" + (f" with reason: {reason}" if reason else "")
        )
        if edited is not None:
            verdict += " with edited arguments"
        return self._done("/ui/approvals", _notice(f"{verdict}."), **request.query_params)

    async def _answer(self, request: Request, ctx: Ctx, form: dict[str, str]) -> Response:
        """Answer or decline a tool's question (an interrupt of kind ``question``)."""
        flow_id, interrupt_id = form.get("id", ""), form.get("interrupt_id", "")
        specs = self.runtime.specs
        items: list[_reads.Approval] = await self._read(lambda tx: _reads.approvals(tx, specs))
        asked = next(
            (a for a in items if a.flow_id == flow_id and a.interrupt_id == interrupt_id), None
        )
        gone = _notice(
            "That question is no longer pending (already answered, or its deadline passed);"
            " nothing changed.",
            error=True,
        )
        if asked is None or asked.kind != "question":
            return await self._approvals(request, ctx, gone, 409)
        declined = form.get("decision") != "answer"
        answer: dict[str, Any] | None = None
        if not declined:
            parsed = _answer_from(form, (asked.question or {}).get("requested_schema"))
            if isinstance(parsed, Safe):
                return await self._approvals(request, ctx, parsed, 400)
            answer = parsed
        ok, out = await self._rpc(
            flow_id,
            "resolve_interrupt",
            {
                "interrupt_id": interrupt_id,
                "approved": not declined,
                "rejection_message": None,
                "answer": answer,
            },
        )
        if not ok:
            return await self._approvals(request, ctx, _notice(out, error=True), 503)
        if out is not True:
            return await self._approvals(request, ctx, gone, 409)
        answered = _notice("Question declined." if declined else "Question answered.")
        return self._done("/ui/approvals", answered, **request.query_params)

    async def _session(
        self, request: Request, ctx: Ctx, notice: Safe | None = None, status: int = 200
    ) -> Response:
        notice = self._flash(request, notice)
        fid = request.query_params.get("id", "")
        specs = self.runtime.specs
        view: _reads.SessionView | None = await self._read(
            lambda tx: _reads.session_view(tx, specs, fid)
        )
        if view is None:
            return _page(
                "Not an agent session",
                _notice(f"Flow {fid} is not an agent session.", error=True),
                404,
            )
        st = view.state
        usage = view.usage
        turns = f"{st.get('turn_count', 0)} (active: {st.get('active_turn_id') or 'none'})"
        summary = Safe(
            "<table class=summary>"
            f"{_kv('Session', link('/ui/flow', view.flow.flow_id, id=view.flow.flow_id))}"
            f"<tr><th>Flow status</th><td>{h(view.flow.status)}</td></tr>"
            f"{_kv('Session status', st.get('status', 'starting'))}"
            f"{_kv('Turns', turns)}"
            f"<tr><th>Queued messages</th><td>{h(view.queued)}</td></tr>"
            f"<tr><th>Usage (session total)</th><td id=usage-total>"
            f"{h(_panels.usage_text(usage))}</td></tr>"
            + (
                f"<tr><th>Last turn error</th><td>{h(st['last_turn_error'])}</td></tr>"
                if st.get("last_turn_error")
                else ""
            )
            + "</table>"
        )
        msgs = join(
            Safe(
                f'<div class="msg msg-{h(m.get("role", ""))}'
                f'{" msg-note" if _panels.is_note(m) else ""}">'
                f"<small>#{h(m.get('sequence'))} {h(m.get('role'))} · {h(m.get('turn_id'))}"
                f" · {when(m.get('created_at'))}"
                + (
                    f" · <span class=note-label>{h(_panels.note_label(m))}</span>"
                    if _panels.is_note(m)
                    else ""
                )
                + f"</small>\n{h(m.get('text', ''))}</div>"
            )
            for m in view.messages
        )
        calls = _panels.tool_call_rows(_panels.with_timing(view))
        waiting = (
            tag("p", f"{len(view.pending)} approval(s) waiting: answer them in the inbox.")
            if view.pending
            else Safe("")
        )
        send = (
            ctx.form(
                "/ui/session/message",
                Safe(
                    f'<input type=hidden name=id value="{h(view.flow.flow_id)}">'
                    "<label>Message <textarea name=text rows=3 cols=60 required></textarea></label>"
                    "<button type=submit>Send</button>"
                ),
            )
            if view.flow.status == "running"
            else Safe("")
        )
        if view.flow.status == "running":
            send = join([send, self._turn_controls(ctx, view)])
        body = join(
            [
                notice or "",
                summary,
                waiting,
                Safe(f"<section id=conversation><h2>Conversation</h2>{msgs}</section>"),
                Safe(
                    "<section><h2>Tool calls of the active turn</h2>"
                    "<table id=tool-calls><tr><th>Turn</th><th>Tool</th>"
                    "<th>Effect</th><th>Policy</th><th>Status</th><th>Arguments</th><th>Outcome</th>"
                    f"<th>Idempotency key</th><th>Timing</th></tr>{calls}</table></section>"
                ),
                send,
                _panels.turns_section(view),
            ]
        )
        return _page(f"Session {view.flow.flow_id}", body, status)

    def _turn_controls(self, ctx: Ctx, view: _reads.SessionView) -> Safe:
        fid = h(view.flow.flow_id)
        steer = ctx.form(
            "/ui/session/steer",
            Safe(
                f'<input type=hidden name=id value="{fid}">'
                "<label>Steer with <textarea name=text rows=2 cols=60 required></textarea>"
                "</label><button type=submit>Steer</button>"
            ),
            class_="steer",
        )
        cancel = ctx.form(
            "/ui/session/cancel",
            Safe(
                f'<input type=hidden name=id value="{fid}">'
                "<button type=submit>Cancel the turn</button>"
            ),
            class_="cancel-turn",
        )
        return Safe(
            f"<section id=turn-controls><h2>Steer or cancel</h2>{_panels.turn_controls_text()}"
            f"{steer}{cancel}</section>"
        )

    async def _steer(self, request: Request, ctx: Ctx) -> Response:
        form: dict[str, str] = request.state.form
        fid = form.get("id", "")
        ok, out = await self._rpc(fid, "steer_user_message", {"text": form.get("text", "")})
        req = _with_query(request, id=fid)
        if not ok:
            return await self._session(req, ctx, _notice(out, error=True), 503)
        if out is not True:
            return await self._session(
                req, ctx, _notice("The steer text was blank: nothing changed.", error=True), 400
            )
        return self._done(
            "/ui/session", _notice("Steered: a new turn starts with the text."), id=fid
        )

    async def _cancel_turn(self, request: Request, ctx: Ctx) -> Response:
        fid = request.state.form.get("id", "")
        ok, out = await self._rpc(fid, "cancel_turn", None)
        req = _with_query(request, id=fid)
        if not ok:
            return await self._session(req, ctx, _notice(out, error=True), 503)
        if out is not True:
            return await self._session(
                req, ctx, _notice("No turn is running: nothing was cancelled.", error=True), 409
            )
        return self._done("/ui/session", _notice("The turn is being cancelled."), id=fid)

    async def _send_message(self, request: Request, ctx: Ctx) -> Response:
        form: dict[str, str] = request.state.form
        fid = form.get("id", "")
        ok, out = await self._rpc(fid, "send_user_message", {"text": form.get("text", "")})
        req = _with_query(request, id=fid)
        if not ok:
            return await self._session(req, ctx, _notice(out, error=True), 503)
        if out is not True:
            return await self._session(
                req, ctx, _notice("The message was blank: nothing was sent.", error=True), 400
            )
        return self._done("/ui/session", _notice("Message queued for the next turn."), id=fid)


def _with_query(request: Request, **params: str) -> Request:
    """The same request, as if its query string were ``params`` (to render after a POST)."""
    from urllib.parse import urlencode

    scope = dict(request.scope)
    scope["query_string"] = urlencode(params).encode()
    return Request(scope)


class WebMount:
    """ASGI middleware: ``/`` and ``/ui...`` go to Dex Web, everything else to the API.

    Dex Web does its own authentication (session cookies), so it sits in front of the
    API's bearer-token check.
    """

    def __init__(self, app: ASGIApp, web: WebUI) -> None:
        self.app = app
        self.web = web

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else None
        if path is not None and (path == "/" or path == "/ui" or path.startswith("/ui/")):
            await self.web(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _edited_arguments(form: dict[str, str]) -> str | Safe | None:
    """The approver's edited arguments, None when unchanged, or an error notice."""
    text = form.get("arguments", "").strip()
    if not text or text == form.get("original", "").strip():
        return None
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        return _notice("Edited arguments must be a JSON object; nothing changed.", error=True)
    return text


_FIELD_TYPES = ("string", "number", "integer", "boolean")


def _form_fields(schema: object) -> dict[str, dict[str, Any]] | None:
    """The question's fields when every one is a primitive (a form can ask them), else None."""
    if not isinstance(schema, dict) or not isinstance(schema.get("properties"), dict):
        return None
    fields: dict[str, dict[str, Any]] = schema["properties"]
    ok = all(isinstance(f, dict) and f.get("type") in _FIELD_TYPES for f in fields.values())
    return fields if ok and fields else None


def _question_card(ctx: Ctx, a: _reads.Approval, left: str) -> Safe:
    """A tool's question: its message, then its fields as a form (or a JSON textarea)."""
    question = a.question or {}
    schema = question.get("requested_schema")
    fields = _form_fields(schema)
    required = set(schema.get("required") or []) if isinstance(schema, dict) else set()
    if fields is not None:
        inputs = []
        for name, field in fields.items():
            label = h(field.get("title") or field.get("description") or name)
            mark = " *" if name in required else ""
            if field.get("type") == "boolean":
                control = f'<input type=checkbox name="field.{h(name)}" value=true>'
            else:
                kind = "number" if field.get("type") in ("number", "integer") else "text"
                step = " step=any" if field.get("type") == "number" else ""
                control = f'<input type={kind}{step} name="field.{h(name)}" size=30>'
            inputs.append(f"<label>{label}{mark} {control}</label> ")
        asks = "".join(inputs)
    else:
        asks = (
            "<label>Answer (a JSON object) <textarea name=answer_json rows=3 cols=60>{}"
            "</textarea></label> "
        )
    url = question.get("url")
    link_to = (
        f'<p>Open: <a href="{h(url)}" rel="noopener noreferrer">{h(url)}</a></p>'
        if isinstance(url, str) and url.startswith(("https://", "http://"))
        else ""
    )
    form = ctx.form(
        "/ui/approvals/resolve",
        Safe(
            f'<input type=hidden name=id value="{h(a.flow_id)}">'
            f'<input type=hidden name=interrupt_id value="{h(a.interrupt_id)}">'
            "<input type=hidden name=kind value=question>"
            f"{asks}"
            "<button type=submit name=decision value=answer>Answer</button> "
            "<button type=submit name=decision value=decline formnovalidate>Decline</button>"
        ),
    )
    session = link("/ui/session", a.flow_id, id=a.flow_id)
    return Safe(
        f'<section class="approval question" data-interrupt="{h(a.interrupt_id)}">'
        f"<h3>Question from {h(a.tool_name)} <small>in {session}</small></h3>"
        f"<p class=question-message>{h(question.get('message') or '')}</p>{link_to}"
        f"<p>Effect: <strong>{h(a.effect or 'unknown')}</strong>"
        f" · asked {when(a.created_at)} · deadline: {h(left)}</p>"
        f"{form}</section>"
    )


def _answer_from(form: dict[str, str], schema: object) -> dict[str, Any] | Safe:
    """The answer a question's form carries, typed by its schema, or an error notice."""
    fields = _form_fields(schema)
    if fields is None:
        try:
            value = json.loads(form.get("answer_json", "").strip() or "{}")
        except ValueError:
            value = None
        if not isinstance(value, dict):
            return _notice("The answer must be a JSON object; nothing changed.", error=True)
        return value
    required = set(schema.get("required") or []) if isinstance(schema, dict) else set()
    answer: dict[str, Any] = {}
    for name, field in fields.items():
        raw = form.get(f"field.{name}", "").strip()
        kind = field.get("type")
        if kind == "boolean":
            answer[name] = raw == "true"
            continue
        if not raw:
            if name in required:
                return _notice(f"{name!r} is required; nothing changed.", error=True)
            continue
        if kind == "string":
            answer[name] = raw
            continue
        try:
            answer[name] = int(raw) if kind == "integer" else float(raw)
        except ValueError:
            return _notice(f"{name!r} must be a {kind}; nothing changed.", error=True)
    return answer
