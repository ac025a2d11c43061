"""Dex Web's live updates: Server-Sent Events and a change version, behind the session cookie.

Browsers' ``EventSource`` cannot send a bearer token, so Dex Web serves the API's feeds
(``api/_sse.py``) again under ``/ui/live``, opened by the Dex Web session cookie instead:

- ``/ui/live/stream?id=FLOW&stream=NAME``: a Stream of the Flow (its type is looked up).
  A first connection without ``after`` starts at the newest message, or, with
  ``start=turn`` on an agent session, at the start of the active turn, so a page opened
  mid-turn still shows that turn's live text;
- ``/ui/live/history?id=FLOW&after=N``: the latest run's history after event ``N``;
- ``/ui/live/version``: the server's change count as an ETag; a poll with
  ``If-None-Match`` is answered ``304`` without touching the store until something
  committed. List pages poll it to know when to refresh.

``/ui/static/dex-live.js`` is the one script of Dex Web (``script-src 'self'``): it uses
these to refresh pages and show live text. Pages work without it.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from dex_server.api import _sse
from dex_server.service import Runtime, _flows
from dex_server.service._common import ServiceError
from dex_server.store import Tx
from dex_server.web import _reads

# Dex Web's feeds stay open longer than the API's default: EventSource reconnects anyway.
LIFETIME_S = 300.0
# How far back (messages) a first connection looks for the start of the active turn.
TURN_SCAN = 500
SCRIPT_PATH = "/ui/static/dex-live.js"

# WebUI._guarded: checks the session cookie, then calls the page with its context
Guard = Callable[
    [Callable[[Request, Any], Awaitable[Response]]], Callable[[Request], Awaitable[Response]]
]

_SCRIPT = (resources.files("dex_server.web") / "static" / "dex-live.js").read_bytes()


def _active_turn(tx: Tx, flow_id: str) -> tuple[str, str | None]:
    flow = _flows.require_flow(tx, flow_id)
    state = _reads.decode(tx, tx.state.get(flow.run_id, "AgentState"))
    turn = state.get("active_turn_id") if isinstance(state, dict) else None
    return flow.flow_type, str(turn) if turn else None


class Live:
    """The ``/ui/live`` routes of one server (cookie checks are the caller's guard)."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        # a new process starts a new version series: a page never mistakes one for another
        self._boot = secrets.token_hex(4)

    def routes(self, guard: Guard) -> list[Route]:
        """The routes, each wrapped by ``guard`` (Dex Web's session check)."""
        g = guard

        async def script(request: Request) -> Response:
            return Response(
                _SCRIPT,
                media_type="text/javascript; charset=utf-8",
                headers={"cache-control": "max-age=300", "x-content-type-options": "nosniff"},
            )

        return [
            Route(SCRIPT_PATH, script),
            Route("/ui/live/stream", g(self._stream), methods=["GET"]),
            Route("/ui/live/history", g(self._history), methods=["GET"]),
            Route("/ui/live/version", g(self._version), methods=["GET"]),
        ]

    def _respond(self, feed: _sse.Feed) -> Response:
        slots = _sse.slots_of(self.runtime)
        try:
            slots.take()
        except ServiceError as err:
            # EventSource gives up on a non-200 answer; the page falls back to polling
            return Response(err.message, status_code=503, media_type="text/plain")
        return _sse.SseResponse(feed, slots)

    async def _stream(self, request: Request, ctx: Any) -> Response:
        rt = self.runtime
        fid = request.query_params.get("id", "")
        name = request.query_params.get("stream", "")
        flow_type, turn = await rt.store.read(lambda tx: _active_turn(tx, fid))
        cap = rt.stream_capacity(flow_type, name)
        key = (flow_type, name, fid)
        after = _sse.resume_point(request)
        if after is None:
            after = await self._start(key, cap, turn if request.query_params.get("start") else None)
        return self._respond(
            _sse.stream_feed(rt, key, cap, after, rt.config.sse_heartbeat_s, LIFETIME_S)
        )

    async def _start(self, key: tuple[str, str, str], cap: int, turn: str | None) -> int:
        """Where a first connection starts: the newest message, or the active turn's start."""
        streams = self.runtime.streams
        newest, _ = await streams.list_page(key, cap, 1, "")
        if not newest:
            return 0
        if turn is None:
            return int(newest[0].resume_token)
        before = ""
        for _ in range(TURN_SCAN // 100):
            page, nxt = await streams.list_page(key, cap, 100, before)
            for m in page:  # newest first
                try:
                    ev = json.loads(bytes(m.value))
                except ValueError:
                    continue
                if not isinstance(ev, dict):
                    continue
                if ev.get("turn_id") != turn:
                    return int(m.resume_token)  # the turn started after this message
                if ev.get("type") == "turn_started":
                    return int(m.resume_token) - 1
            if nxt is None:
                return 0
            before = nxt
        return int(newest[0].resume_token)

    async def _history(self, request: Request, ctx: Any) -> Response:
        rt = self.runtime
        fid = request.query_params.get("id", "")
        after = _sse.resume_point(request) or 0
        flow = await rt.store.read(lambda tx: _flows.require_flow(tx, fid))
        return self._respond(
            _sse.history_feed(rt, fid, flow.run_id, after, rt.config.sse_heartbeat_s, LIFETIME_S)
        )

    async def _version(self, request: Request, ctx: Any) -> Response:
        tag = f'"{self._boot}-{self.runtime.changes.count}"'
        headers = {"etag": tag, "cache-control": "no-cache"}
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=304, headers=headers)
        return Response(
            json.dumps({"version": tag.strip('"')}), media_type="application/json", headers=headers
        )
