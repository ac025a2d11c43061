from __future__ import annotations

import asyncio
import hmac
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, get_args

import msgspec
from dex._protocol import (
    HTTP_STATUS,
    MAX_FLOW_ID_BYTES,
    ApiError,
    ErrorCode,
    FlowConfigWire,
    FlowListResponse,
    HealthResponse,
    InvokeRpcRequest,
    InvokeRpcResponse,
    ReadAttributesRequest,
    SkipTimerRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
    TimeTravelRequest,
    TimeTravelResponse,
    encoder,
)
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from dex_server.api import _search, _sse
from dex_server.api._openapi import openapi_document
from dex_server.api._paths import (
    MAX_SEGMENT_BYTES,
    RawPathRoute,
    check_strings,
    check_text,
    is_path,
)
from dex_server.api._worker import worker_endpoint
from dex_server.engine.ids import is_uuid7
from dex_server.service import Runtime, _flows
from dex_server.service._common import ServiceError
from dex_server.store import StoreUnavailableError
from dex_server.store._records import FlowStatus

log = logging.getLogger("dex_server.api")

S = TypeVar("S")
VERSION = "0.1.0"
_JSON = "application/json"


def _json(body: object, status: int = 200) -> Response:
    return Response(encoder.encode(body), status_code=status, media_type=_JSON)


def error_response(err: ServiceError) -> Response:
    body = ApiError(
        code=err.code,
        message=err.message,
        detail=err.detail,
        flow_id=err.flow_id,
        worker_error_type=err.worker_error_type,
        worker_error_detail=err.worker_error_detail,
        retryable=err.code
        in (
            ErrorCode.RPC_LOCK_CONFLICT,
            ErrorCode.LONG_POLL_TIMEOUT,
            ErrorCode.REQUEST_TIMEOUT,
            ErrorCode.UNAVAILABLE,
        ),
    )
    return _json(body, HTTP_STATUS.get(err.code, 500))


async def _body(request: Request, tp: type[S], limit: int) -> S:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise ServiceError(
            ErrorCode.LIMIT_EXCEEDED,
            f"request body is {declared} bytes, over the limit max_request_bytes={limit}",
        )
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise ServiceError(
                ErrorCode.LIMIT_EXCEEDED,
                f"request body is over {len(chunks)} bytes, over the limit"
                f" max_request_bytes={limit}",
            )
    try:
        body = msgspec.json.decode(bytes(chunks), type=tp)
    except msgspec.ValidationError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"invalid {tp.__name__}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"malformed JSON body: {exc}") from None
    except RecursionError:
        raise ServiceError(ErrorCode.BAD_REQUEST, "JSON body is nested too deeply") from None
    check_strings(body, "")
    return body


# Longest query parameter value read (tokens are at most a run ID or an integer).
MAX_QUERY_VALUE_BYTES = 1024


def _query(request: Request, name: str) -> str:
    raw = request.query_params.get(name, "")
    if len(request.query_params.getlist(name)) > 1:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"query parameter {name} is given more than once")
    return check_text(
        raw, f"query parameter {name}", "max_query_value_bytes", MAX_QUERY_VALUE_BYTES
    )


def _float(request: Request, name: str, default: float) -> float:
    raw = _query(request, name)
    if raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"query parameter {name}={raw[:40]!r} is not a finite number"
        )
    return value


def _digits(request: Request, name: str) -> str:
    # a position token: the decimal sequence number the server handed out, or empty
    token = _query(request, name)
    if token and not (token.isascii() and token.isdigit() and len(token) <= 18):
        raise ServiceError(ErrorCode.BAD_REQUEST, f"bad {name} {token[:40]!r}")
    return token


def _flow_id(request: Request) -> str:
    return check_text(
        request.path_params["flow_id"], "flow_id", "max_flow_id_bytes", MAX_FLOW_ID_BYTES
    )


def _segment(request: Request, name: str) -> str:
    return check_text(
        request.path_params[name], f"path parameter {name}", "max_segment_bytes", MAX_SEGMENT_BYTES
    )


# the most messages one Stream long poll returns (``max_messages`` above it is capped)
MAX_STREAM_READ_MESSAGES = 100


def _int(request: Request, name: str, default: int, maximum: int = 1000) -> int:
    v = _float(request, name, default)
    if v < 1 or v != int(v):
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"query parameter {name} must be a positive integer"
        )
    return min(int(v), maximum)


_FLOW_STATUSES: tuple[str, ...] = get_args(FlowStatus)


def _status(request: Request) -> str | None:
    status = _query(request, "status") or None
    if status is not None and status not in _FLOW_STATUSES:
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"bad status {status!r}; one of {', '.join(_FLOW_STATUSES)}"
        )
    return status


Handler = Callable[[Request], Awaitable[Response]]


def _guard(fn: Handler) -> Handler:
    async def wrapped(request: Request) -> Response:
        try:
            if "timeout_s" in request.query_params:
                return await _unless_stopping(request, fn)
            return await fn(request)
        except ServiceError as err:
            return error_response(err)
        except StoreUnavailableError as exc:
            return error_response(ServiceError(ErrorCode.UNAVAILABLE, str(exc)))
        except ClientDisconnect:
            # the client is gone (or its body was too slow): nobody reads this answer
            return Response(status_code=400)
        except Exception as exc:
            # a defect of ours: the client still gets an ApiError it can read, the log the trace
            log.exception("%s %s failed", request.method, request.url.path)
            return error_response(
                ServiceError(ErrorCode.INTERNAL, f"internal error ({type(exc).__name__})")
            )

    return wrapped


async def _unless_stopping(request: Request, fn: Handler) -> Response:
    # A long poll may hold its request for a minute: a stopping server ends it at once with
    # a retryable UNAVAILABLE instead of holding its graceful stop and then failing it.
    stopping = _sse.slots_of(request.app.state.runtime).closing
    if stopping.is_set():
        raise _stopping_error()
    call = asyncio.ensure_future(fn(request))
    stop = asyncio.ensure_future(stopping.wait())
    try:
        await asyncio.wait((call, stop), return_when=asyncio.FIRST_COMPLETED)
    finally:
        stop.cancel()
        if not call.done():
            call.cancel()
            await asyncio.gather(call, return_exceptions=True)
    if call.cancelled():
        raise _stopping_error()
    return call.result()


def _stopping_error() -> ServiceError:
    return ServiceError(ErrorCode.UNAVAILABLE, "the server is stopping; call again")


def build_routes(runtime: Runtime) -> list[BaseRoute]:
    limit = runtime.config.max_request_bytes

    async def health(request: Request) -> Response:
        # never waits on the store: the probe loop keeps what it last saw
        reason = runtime.health.reason()
        return _json(
            HealthResponse(
                ok=reason is None,
                version=VERSION,
                store=runtime.store.kind,
                status="ok" if reason is None else "degraded",
                reason=reason,
            )
        )

    async def start(request: Request) -> Response:
        req = await _body(request, StartFlowRequest, limit)
        return _json(StartFlowResponse(run_id=await runtime.start_flow(req)))

    async def list_flows(request: Request) -> Response:
        size = _int(request, "page_size", 100)
        token = _query(request, "page_token") or None
        if token is not None and not is_uuid7(token):
            # the token is the run ID of the previous page's last Flow
            raise ServiceError(ErrorCode.BAD_REQUEST, f"bad page_token {token[:40]!r}")
        status = _status(request)
        flow_type = _query(request, "flow_type") or None
        flows = await runtime.run(
            lambda tx: tx.flows.page(
                flow_type=flow_type,
                status=status,
                limit=size + 1,
                before_run_id=token,
            )
        )
        page = flows[:size]
        nxt = page[-1].run_id if len(flows) > size else None
        return _json(FlowListResponse(flows=[_flows.info(f) for f in page], next_page_token=nxt))

    async def describe(request: Request) -> Response:
        fid = _flow_id(request)
        return _json(await runtime.run(lambda tx: _flows.describe(tx, fid)))

    async def state(request: Request) -> Response:
        fid = _flow_id(request)
        running = dict(runtime.dispatcher.running)
        return _json(await runtime.run(lambda tx: _flows.state_of(tx, fid, running)))

    async def result(request: Request) -> Response:
        fid = _flow_id(request)
        timeout = min(max(_float(request, "timeout_s", 60.0), 0.0), 60.0)
        if not await runtime.wait_closed(fid, timeout):
            raise ServiceError(
                ErrorCode.LONG_POLL_TIMEOUT, f"Flow {fid!r} is still running", flow_id=fid
            )
        return _json(await runtime.run(lambda tx: _flows.result_of(tx, fid)))

    async def rpc(request: Request) -> Response:
        fid = _flow_id(request)
        req = await _body(request, InvokeRpcRequest, limit)
        runtime.limits.check_value(bytes(req.input) if req.input is not None else None, "RPC input")
        return _json(InvokeRpcResponse(output=await runtime.invoke_rpc(fid, req)))

    async def stop(request: Request) -> Response:
        fid = _flow_id(request)
        req = await _body(request, StopFlowRequest, limit)
        await runtime.stop_flow(fid, req)
        return _json({})

    async def history(request: Request) -> Response:
        fid = _flow_id(request)
        size = _int(request, "page_size", 200)
        run_id, token = _query(request, "run_id"), _digits(request, "page_token")
        return _json(
            await runtime.run(lambda tx: _flows.history_page(tx, fid, run_id, size, token))
        )

    async def blob(request: Request) -> Response:
        h = _segment(request, "sha256")
        data = await runtime.run(lambda tx: tx.blobs.get(h))
        if data is None:
            return _json(ApiError(code=ErrorCode.NOT_FOUND, message=f"no blob {h[:80]}"), 404)
        return Response(data, media_type="application/octet-stream")

    async def openapi(request: Request) -> Response:
        return Response(openapi_document(), media_type=_JSON)

    g, R = _guard, RawPathRoute
    return [
        R("/v1/health", g(health), methods=["GET"]),
        R("/openapi.json", g(openapi), methods=["GET"]),
        R("/v1/flows", g(start), methods=["POST"]),
        R("/v1/flows", g(_search.or_search(runtime, list_flows)), methods=["GET"]),
        R("/v1/flows/{flow_id}", g(describe), methods=["GET"]),
        R("/v1/flows/{flow_id}/state", g(state), methods=["GET"]),
        _attributes_route(runtime),
        _match_route(runtime),
        R("/v1/flows/{flow_id}/result", g(result), methods=["GET"]),
        R("/v1/flows/{flow_id}/rpc", g(rpc), methods=["POST"]),
        R("/v1/flows/{flow_id}/stop", g(stop), methods=["POST"]),
        R("/v1/flows/{flow_id}/history", g(history), methods=["GET"]),
        *_run_routes(runtime),
        *_stream_routes(runtime),
        *_sse_routes(runtime),
        *_step_routes(runtime),
        R("/v1/blobs/{sha256}", g(blob), methods=["GET"]),
        WebSocketRoute("/v1/worker", worker_endpoint(runtime)),
    ]


def _attributes_route(runtime: Runtime) -> BaseRoute:
    limit = runtime.config.max_request_bytes

    async def attributes(request: Request) -> Response:
        fid = _flow_id(request)
        req = await _body(request, ReadAttributesRequest, limit)
        # committed values only: no Worker, and off the writer
        return _json(
            await runtime.store.read(lambda tx: _flows.read_attributes(tx, runtime.specs, fid, req))
        )

    return RawPathRoute("/v1/flows/{flow_id}/attributes", _guard(attributes), methods=["POST"])


def _run_routes(runtime: Runtime) -> list[BaseRoute]:
    """Routes that make a new run of a Flow ID: time travel and continue-as-new."""
    limit = runtime.config.max_request_bytes

    async def time_travel(request: Request) -> Response:
        fid = _flow_id(request)
        req = await _body(request, TimeTravelRequest, limit)
        return _json(TimeTravelResponse(run_id=await runtime.time_travel(fid, req)))

    async def continue_as_new(request: Request) -> Response:
        await runtime.trigger_continue_as_new(_flow_id(request))
        return _json({})

    return [
        RawPathRoute("/v1/flows/{flow_id}/time-travel", _guard(time_travel), methods=["POST"]),
        RawPathRoute(
            "/v1/flows/{flow_id}/continue-as-new", _guard(continue_as_new), methods=["POST"]
        ),
    ]


def _step_routes(runtime: Runtime) -> list[BaseRoute]:
    limit = runtime.config.max_request_bytes

    def _step(request: Request) -> tuple[str, str, int]:
        raw = _segment(request, "number")
        if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
            raise ServiceError(
                ErrorCode.BAD_REQUEST, f"a Step execution number is a positive integer: {raw!r}"
            )
        return _flow_id(request), _segment(request, "step_type"), int(raw)

    async def completion(request: Request) -> Response:
        timeout = min(max(_float(request, "timeout_s", 60.0), 0.0), 60.0)
        fid, step_type, number = _step(request)
        if not await runtime.wait_step_done(fid, step_type, number, timeout):
            raise ServiceError(
                ErrorCode.LONG_POLL_TIMEOUT,
                f"Step execution {step_type}-{number} of Flow {fid!r} is still running",
                flow_id=fid,
            )
        return _json({})

    async def config(request: Request) -> Response:
        fid = _flow_id(request)
        req = await _body(request, FlowConfigWire, limit)
        await runtime.update_flow_config(fid, req)
        return _json(await runtime.run(lambda tx: _flows.describe(tx, fid)))

    async def skip_timer(request: Request) -> Response:
        fid, step_type, number = _step(request)
        req = await _body(request, SkipTimerRequest, limit)
        await runtime.skip_timer(fid, step_type, number, req.condition_id, req.condition_index)
        return _json({})

    g, R = _guard, RawPathRoute
    base = "/v1/flows/{flow_id}/steps/{step_type}/{number}"
    return [
        R("/v1/flows/{flow_id}/config", g(config), methods=["POST"]),
        R(base + "/completion", g(completion), methods=["GET"]),
        R(base + "/skip-timer", g(skip_timer), methods=["POST"]),
    ]


def _match_route(runtime: Runtime) -> BaseRoute:
    async def attribute_match(request: Request) -> Response:
        return await _search.attribute_match(runtime, request, _flow_id(request))

    return RawPathRoute(
        "/v1/flows/{flow_id}/attributes/match", _guard(attribute_match), methods=["GET"]
    )


def _stream_routes(runtime: Runtime) -> list[BaseRoute]:
    limit = runtime.config.max_request_bytes

    def _stream_key(request: Request) -> tuple[str, str, str]:
        return _segment(request, "flow_type"), _segment(request, "stream"), _flow_id(request)

    async def stream_write(request: Request) -> Response:
        ft, st, fid = _stream_key(request)
        runtime.limits.check_flow_id(fid)
        req = await _body(request, StreamWriteRequest, limit)
        if not req.source:
            raise ServiceError(ErrorCode.BAD_REQUEST, "a Stream write needs a non-empty source")
        committed = runtime.stream_write(ft, st, fid, bytes(req.value), req.source)
        if committed is not None:
            await committed  # a client reads its own writes, on any server
        return _json({})

    async def stream_next(request: Request) -> Response:
        ft, st, fid = _stream_key(request)
        cap = runtime.stream_capacity(ft, st)
        token = _digits(request, "resume_token")
        timeout = min(max(_float(request, "timeout_s", 60.0), 0.0), 60.0)
        if "max_messages" not in request.query_params:
            msg = await runtime.streams.read_next((ft, st, fid), cap, token, timeout)
            return _json(StreamReadResponse(message=msg))
        limit = _int(request, "max_messages", 1, MAX_STREAM_READ_MESSAGES)
        msgs = await runtime.streams.read_batch((ft, st, fid), cap, token, timeout, limit)
        return _json(StreamReadResponse(message=msgs[0] if msgs else None, messages=msgs))

    async def stream_list(request: Request) -> Response:
        ft, st, fid = _stream_key(request)
        cap = runtime.stream_capacity(ft, st)
        before = _digits(request, "before")
        msgs, nxt = await runtime.streams.list_page(
            (ft, st, fid), cap, _int(request, "page_size", 100), before
        )
        return _json(StreamListResponse(messages=msgs, before_page_token=nxt))

    g, R = _guard, RawPathRoute
    return [
        R("/v1/streams/{flow_type}/{stream}/{flow_id}/next", g(stream_next), methods=["GET"]),
        R("/v1/streams/{flow_type}/{stream}/{flow_id}", g(stream_write), methods=["POST"]),
        R("/v1/streams/{flow_type}/{stream}/{flow_id}", g(stream_list), methods=["GET"]),
    ]


def _sse_routes(runtime: Runtime) -> list[BaseRoute]:
    """The Server-Sent Events feeds (see ``api/_sse.py``)."""

    def respond(feed: _sse.Feed) -> Response:
        slots = _sse.slots_of(runtime)
        slots.take()
        return _sse.SseResponse(feed, slots)

    async def stream_events(request: Request) -> Response:
        ft, st, fid = _segment(request, "flow_type"), _segment(request, "stream"), _flow_id(request)
        cap = runtime.stream_capacity(ft, st)
        after = _sse.resume_point(request) or 0
        life = min(max(_float(request, "timeout_s", 60.0), 0.0), 60.0)
        # the feed ends when the Flow closes: it must exist
        await runtime.store.read(lambda tx: _flows.require_flow(tx, fid))
        return respond(
            _sse.stream_feed(
                runtime, (ft, st, fid), cap, after, runtime.config.sse_heartbeat_s, life
            )
        )

    async def history_events(request: Request) -> Response:
        fid = _flow_id(request)
        run_id = _query(request, "run_id")
        after = _sse.resume_point(request) or 0
        life = min(max(_float(request, "timeout_s", 60.0), 0.0), 60.0)
        flow = await runtime.store.read(lambda tx: _flows.require_flow(tx, fid, run_id))
        return respond(
            _sse.history_feed(
                runtime, fid, flow.run_id, after, runtime.config.sse_heartbeat_s, life
            )
        )

    g, R = _guard, RawPathRoute
    return [
        R("/v1/streams/{flow_type}/{stream}/{flow_id}/events", g(stream_events), methods=["GET"]),
        R("/v1/flows/{flow_id}/history/events", g(history_events), methods=["GET"]),
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette's 404 (no route) and 405 (route without this method), as ApiError bodies
    status = exc.status_code if isinstance(exc, HTTPException) else 500
    if status == 405:
        code, message = ErrorCode.METHOD_NOT_ALLOWED, f"{request.method} is not allowed here"
    elif status == 404:
        code, message = ErrorCode.NOT_FOUND, "no such route"
    else:
        code, message = ErrorCode.INTERNAL, "internal error"
    headers = dict(exc.headers or {}) if isinstance(exc, HTTPException) else {}
    if status == 405:
        # every method of every route on this path, not only the first route's
        allowed = {
            m
            for route in request.app.router.routes
            if isinstance(route, RawPathRoute) and route.matches(request.scope)[0] != Match.NONE
            for m in route.methods or ()
        }
        headers["Allow"] = ", ".join(sorted(allowed))
    return Response(
        encoder.encode(ApiError(code=code, message=message)),
        status_code=status,
        media_type=_JSON,
        headers=headers,
    )


# Starlette ``exception_handlers`` that answer unknown routes and methods with an ApiError.
HTTP_ERROR_HANDLERS: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
    404: _http_error,
    405: _http_error,
}


def _bearer_token(header: bytes) -> bytes | None:
    # RFC 7235: the scheme is case-insensitive, one or more spaces before the credentials
    scheme, _, rest = header.partition(b" ")
    if scheme.lower() != b"bearer":
        return None
    return rest.lstrip(b" ")


def bearer_token_matches(header: bytes, token: bytes) -> bool:
    """Whether the ``Authorization`` header value ``header`` carries ``token``."""
    given = _bearer_token(header)
    return given is not None and hmac.compare_digest(given, token)


class BearerAuth:
    """Require ``Authorization: Bearer <token>`` on every route but ``/v1/health``."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.token is None
            or scope["type"] not in ("http", "websocket")
            or is_path(scope, "/v1/health")
        ):
            await self.app(scope, receive, send)
            return
        header = b""
        for k, v in scope.get("headers", []):
            if k == b"authorization":
                header = v
        if bearer_token_matches(header, self.token):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await receive()
            await send({"type": "websocket.close", "code": 4401, "reason": "UNAUTHENTICATED"})
            return
        body = encoder.encode(
            ApiError(code=ErrorCode.UNAUTHENTICATED, message="a valid bearer token is required")
        )
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
