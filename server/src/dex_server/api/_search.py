"""HTTP handlers of Flow search and of Attribute matches.

``GET /v1/flows?query=...`` (the query parameter present, even empty) answers a search
page instead of the plain listing; ``GET /v1/flows/{flow_id}/attributes/match`` long-polls
until a committed Attribute satisfies a predicate.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from dex._protocol import AttributeMatchResponse, ErrorCode, encoder
from starlette.requests import Request
from starlette.responses import Response

from dex_server.api._paths import check_text
from dex_server.engine import features
from dex_server.engine.query import MAX_QUERY_BYTES
from dex_server.engine.search import MatchOp, check_match
from dex_server.service import Runtime
from dex_server.service._common import ServiceError
from dex_server.service._search import match_attribute, search_flows

__all__ = ["attribute_match", "or_search", "search"]

_LONG_POLL_CAP_S = 60.0
# how often a waiting match re-reads the committed value (any server may commit it)
_MATCH_POLL_S = 0.05
_MATCH_POLL_MAX_S = 0.5


def _param(request: Request, name: str, maximum: int = 1024) -> str:
    if len(request.query_params.getlist(name)) > 1:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"query parameter {name} is given more than once")
    limit = "max_query_bytes" if name == "query" else "max_query_value_bytes"
    return check_text(request.query_params.get(name, ""), f"query parameter {name}", limit, maximum)


def _number(request: Request, name: str, default: float) -> float:
    raw = _param(request, name)
    if not raw:
        return default
    try:
        v = float(raw)
    except ValueError:
        v = math.nan
    if not math.isfinite(v):
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"query parameter {name}={raw[:40]!r} is not a number"
        )
    return v


def _json(body: object) -> Response:
    return Response(encoder.encode(body), media_type="application/json")


def or_search(
    runtime: Runtime, listing: Callable[[Request], Awaitable[Response]]
) -> Callable[[Request], Awaitable[Response]]:
    """``listing``, except that a request with a ``query`` parameter is a search."""

    async def handler(request: Request) -> Response:
        if "query" in request.query_params:
            return await search(runtime, request)
        return await listing(request)

    return handler


async def search(runtime: Runtime, request: Request) -> Response:
    """Answer one search page.

    Parameters: ``query``, ``page_size`` (1..1000, default 100), ``page_token``,
    ``include_continued_as_new`` (``true``/``false``).
    """
    runtime.require([features.SEARCH])
    query = _param(request, "query", MAX_QUERY_BYTES)
    size = _number(request, "page_size", 100)
    if size != int(size):
        raise ServiceError(ErrorCode.BAD_REQUEST, "query parameter page_size must be an integer")
    token = _param(request, "page_token")
    flag = _param(request, "include_continued_as_new").lower()
    if flag not in ("", "true", "false", "1", "0"):
        raise ServiceError(ErrorCode.BAD_REQUEST, "include_continued_as_new must be true or false")
    include = flag in ("true", "1")
    page = await runtime.store.read(lambda tx: search_flows(tx, query, int(size), token, include))
    return _json(page)


async def attribute_match(runtime: Runtime, request: Request, flow_id: str) -> Response:
    """Long-poll until Attribute ``name`` matches ``op`` (1..6) and ``operand`` (JSON).

    Answers ``LONG_POLL_TIMEOUT`` after ``timeout_s`` (at most 60 s, default 60) without a
    match; the client calls again.
    """
    name = _param(request, "name")
    if not name:
        raise ServiceError(ErrorCode.BAD_REQUEST, "query parameter name is required")
    op_raw = _number(request, "op", 0)
    if op_raw not in {m.value for m in MatchOp}:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"query parameter op must be 1..6, got {op_raw}")
    op = MatchOp(int(op_raw))
    try:
        operand: Any = msgspec.json.decode(_param(request, "operand") or "null")
    except msgspec.DecodeError:
        raise ServiceError(ErrorCode.BAD_REQUEST, "query parameter operand is not JSON") from None
    problem = check_match(op, operand)
    if problem is not None:
        raise ServiceError(ErrorCode.BAD_REQUEST, problem)
    timeout = min(max(_number(request, "timeout_s", _LONG_POLL_CAP_S), 0.0), _LONG_POLL_CAP_S)
    deadline = time.monotonic() + timeout
    pause = _MATCH_POLL_S
    while True:
        matched, raw = await runtime.store.read(
            lambda tx: match_attribute(tx, flow_id, name, op, operand)
        )
        if matched:
            return _json(AttributeMatchResponse(value=None if raw is None else msgspec.Raw(raw)))
        left = deadline - time.monotonic()
        if left <= 0:
            raise ServiceError(
                ErrorCode.LONG_POLL_TIMEOUT,
                f"Attribute {name!r} of Flow {flow_id!r} does not match yet",
                flow_id=flow_id,
            )
        await asyncio.sleep(min(pause, left))
        pause = min(pause * 2, _MATCH_POLL_MAX_S)
