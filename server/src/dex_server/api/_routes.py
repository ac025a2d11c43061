from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TypeVar, get_args

import msgspec
from dex._protocol import (
    HTTP_STATUS,
    ApiError,
    ErrorCode,
    FlowListResponse,
    HealthResponse,
    InvokeRpcRequest,
    InvokeRpcResponse,
    ReadAttributesRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
    encoder,
)
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from dex_server.api._openapi import openapi_document
from dex_server.api._worker import worker_endpoint
from dex_server.engine import features
from dex_server.engine.ids import is_uuid7
from dex_server.service import Runtime, _flows
from dex_server.service._common import ServiceError
from dex_server.store import StoreUnavailableError
from dex_server.store._records import FlowStatus

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
        return msgspec.json.decode(bytes(chunks), type=tp)
    except msgspec.ValidationError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"invalid {tp.__name__}: {exc}") from None
    except msgspec.DecodeError as exc:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"malformed JSON body: {exc}") from None


def _float(request: Request, name: str, default: float) -> float:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"query parameter {name}={raw!r} is not a number"
        ) from None


def _int(request: Request, name: str, default: int, maximum: int = 1000) -> int:
    v = _float(request, name, default)
    if v < 1 or v != int(v):
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"query parameter {name} must be a positive integer"
        )
    return min(int(v), maximum)


_FLOW_STATUSES: tuple[str, ...] = get_args(FlowStatus)


def _status(request: Request) -> str | None:
    status = request.query_params.get("status") or None
    if status is not None and status not in _FLOW_STATUSES:
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"bad status {status!r}; one of {', '.join(_FLOW_STATUSES)}"
        )
    return status


Handler = Callable[[Request], Awaitable[Response]]


def _guard(fn: Handler) -> Handler:
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except ServiceError as err:
            return error_response(err)
        except StoreUnavailableError as exc:
            return error_response(ServiceError(ErrorCode.UNAVAILABLE, str(exc)))

    return wrapped


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
        q = request.query_params
        runtime.require([features.SEARCH] * bool(q.get("query")))
        size = _int(request, "page_size", 100)
        token = q.get("page_token") or None
        if token is not None and not is_uuid7(token):
            # the token is the run ID of the previous page's last Flow
            raise ServiceError(ErrorCode.BAD_REQUEST, f"bad page_token {token!r}")
        status = _status(request)
        flows = await runtime.run(
            lambda tx: tx.flows.page(
                flow_type=q.get("flow_type") or None,
                status=status,
                limit=size + 1,
                before_run_id=token,
            )
        )
        page = flows[:size]
        nxt = page[-1].run_id if len(flows) > size else None
        return _json(FlowListResponse(flows=[_flows.info(f) for f in page], next_page_token=nxt))

    async def describe(request: Request) -> Response:
        fid = request.path_params["flow_id"]
        return _json(await runtime.run(lambda tx: _flows.describe(tx, fid)))

    async def state(request: Request) -> Response:
        fid = request.path_params["flow_id"]
        running = dict(runtime.dispatcher.running)
        return _json(await runtime.run(lambda tx: _flows.state_of(tx, fid, running)))

    async def result(request: Request) -> Response:
        fid = request.path_params["flow_id"]
        timeout = min(max(_float(request, "timeout_s", 60.0), 0.0), 60.0)
        if not await runtime.wait_closed(fid, timeout):
            raise ServiceError(
                ErrorCode.LONG_POLL_TIMEOUT, f"Flow {fid!r} is still running", flow_id=fid
            )
        return _json(await runtime.run(lambda tx: _flows.result_of(tx, fid)))

    async def rpc(request: Request) -> Response:
        fid = request.path_params["flow_id"]
        req = await _body(request, InvokeRpcRequest, limit)
        runtime.limits.check_value(bytes(req.input) if req.input is not None else None, "RPC input")
        return _json(InvokeRpcResponse(output=await runtime.invoke_rpc(fid, req)))

    async def stop(request: Request) -> Response:
        fid = request.path_params["flow_id"]
        req = await _body(request, StopFlowRequest, limit)
        await runtime.stop_flow(fid, req)
        return _json({})

    async def history(request: Request) -> Response:
        fid = request.path_params["flow_id"]
        q = request.query_params
        size = _int(request, "page_size", 200)
        run_id, token = q.get("run_id", ""), q.get("page_token", "")
        return _json(
            await runtime.run(lambda tx: _flows.history_page(tx, fid, run_id, size, token))
        )

    async def blob(request: Request) -> Response:
        h = request.path_params["sha256"]
        data = await runtime.run(lambda tx: tx.blobs.get(h))
        if data is None:
            return _json(ApiError(code="NOT_FOUND", message=f"no blob {h}"), 404)
        return Response(data, media_type="application/octet-stream")

    async def openapi(request: Request) -> Response:
        return Response(openapi_document(), media_type=_JSON)

    g = _guard
    return [
        Route("/v1/health", g(health)),
        Route("/openapi.json", g(openapi)),
        Route("/v1/flows", g(start), methods=["POST"]),
        Route("/v1/flows", g(list_flows), methods=["GET"]),
        Route("/v1/flows/{flow_id}", g(describe), methods=["GET"]),
        Route("/v1/flows/{flow_id}/state", g(state), methods=["GET"]),
        _attributes_route(runtime),
        Route("/v1/flows/{flow_id}/result", g(result), methods=["GET"]),
        Route("/v1/flows/{flow_id}/rpc", g(rpc), methods=["POST"]),
        Route("/v1/flows/{flow_id}/stop", g(stop), methods=["POST"]),
        Route("/v1/flows/{flow_id}/history", g(history), methods=["GET"]),
        *_stream_routes(runtime),
        Route("/v1/blobs/{sha256}", g(blob), methods=["GET"]),
        WebSocketRoute("/v1/worker", worker_endpoint(runtime)),
    ]


def _attributes_route(runtime: Runtime) -> BaseRoute:
    limit = runtime.config.max_request_bytes

    async def attributes(request: Request) -> Response:
        fid = request.path_params["flow_id"]
        req = await _body(request, ReadAttributesRequest, limit)
        # committed values only: no Worker, and off the writer
        return _json(
            await runtime.store.read(lambda tx: _flows.read_attributes(tx, runtime.specs, fid, req))
        )

    return Route("/v1/flows/{flow_id}/attributes", _guard(attributes), methods=["POST"])


def _stream_routes(runtime: Runtime) -> list[BaseRoute]:
    limit = runtime.config.max_request_bytes

    def _stream_key(request: Request) -> tuple[str, str, str]:
        p = request.path_params
        return p["flow_type"], p["stream"], p["flow_id"]

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
        token = request.query_params.get("resume_token", "")
        if token and not token.isdigit():
            raise ServiceError(ErrorCode.BAD_REQUEST, f"bad resume_token {token!r}")
        timeout = min(max(_float(request, "timeout_s", 60.0), 0.0), 60.0)
        msg = await runtime.streams.read_next((ft, st, fid), cap, token, timeout)
        return _json(StreamReadResponse(message=msg))

    async def stream_list(request: Request) -> Response:
        ft, st, fid = _stream_key(request)
        cap = runtime.stream_capacity(ft, st)
        before = request.query_params.get("before", "")
        if before and not before.isdigit():
            raise ServiceError(ErrorCode.BAD_REQUEST, f"bad before token {before!r}")
        msgs, nxt = await runtime.streams.list_page(
            (ft, st, fid), cap, _int(request, "page_size", 100), before
        )
        return _json(StreamListResponse(messages=msgs, before_page_token=nxt))

    g = _guard
    return [
        Route("/v1/streams/{flow_type}/{stream}/{flow_id}/next", g(stream_next), methods=["GET"]),
        Route("/v1/streams/{flow_type}/{stream}/{flow_id}", g(stream_write), methods=["POST"]),
        Route("/v1/streams/{flow_type}/{stream}/{flow_id}", g(stream_list), methods=["GET"]),
    ]


class BearerAuth:
    """Require ``Authorization: Bearer <token>`` on every route but ``/v1/health``."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token.encode() if token else None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            self.token is None
            or scope["type"] not in ("http", "websocket")
            or (scope["path"] == "/v1/health")
        ):
            await self.app(scope, receive, send)
            return
        header = b""
        for k, v in scope.get("headers", []):
            if k == b"authorization":
                header = v
        ok = hmac.compare_digest(header, b"Bearer " + self.token)
        if ok:
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
