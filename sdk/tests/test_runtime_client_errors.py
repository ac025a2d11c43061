from __future__ import annotations

import socket
from datetime import timedelta
from typing import Any

import httpx
import msgspec
import pytest
from dex import (
    AsyncClient,
    Client,
    ClientOptions,
    FlowStatus,
    Registry,
    RPCInvokeOptions,
    StartFlowOptions,
)
from dex._client import _defs
from dex._protocol import HTTP_STATUS, MAX_FLOW_ID_BYTES, ApiError, ErrorCode
from dex._transport import HttpTransport, http_base_url, ws_url
from dex.errors import (
    BadRequestError,
    DexServiceError,
    ErrorSubStatus,
    FlowAlreadyStartedError,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    LimitExceededError,
    LongPollTimeoutError,
    RpcLockConflictError,
    ServiceUnavailableError,
    StatusCode,
    UnauthenticatedError,
    WorkerInvocationError,
)

from .test_unit_definitions import make_flow


def _transport(handler: httpx.MockTransport) -> HttpTransport:
    http = httpx.AsyncClient(base_url="http://dex.test", transport=handler)
    return HttpTransport("dex.test", credential=None, timeout=5.0, http=http)


def _answer(code: str, *, detail: str, flow_id: str, retryable: bool) -> httpx.MockTransport:
    error = ApiError(
        code=code, message=f"boom {code}", detail=detail, flow_id=flow_id, retryable=retryable
    )
    body = msgspec.json.encode(error)
    return httpx.MockTransport(lambda request: httpx.Response(HTTP_STATUS[code], content=body))


S = StatusCode
U = ErrorSubStatus


@pytest.mark.parametrize(
    ("code", "cls", "status", "sub_status"),
    [
        (
            ErrorCode.FLOW_ALREADY_STARTED,
            FlowAlreadyStartedError,
            S.ALREADY_EXISTS,
            U.FLOW_ALREADY_STARTED,
        ),
        (ErrorCode.FLOW_NOT_FOUND, FlowNotFoundError, S.NOT_FOUND, U.FLOW_NOT_EXISTS),
        (
            ErrorCode.FLOW_NOT_ACTIVE,
            FlowNotActiveOrNotFoundError,
            S.FAILED_PRECONDITION,
            U.FLOW_NOT_EXISTS,
        ),
        (ErrorCode.RPC_LOCK_CONFLICT, RpcLockConflictError, S.ABORTED, U.UNCATEGORIZED),
        (
            ErrorCode.LONG_POLL_TIMEOUT,
            LongPollTimeoutError,
            S.DEADLINE_EXCEEDED,
            U.LONG_POLL_TIMEOUT,
        ),
        (ErrorCode.LIMIT_EXCEEDED, LimitExceededError, S.RESOURCE_EXHAUSTED, U.UNCATEGORIZED),
        (ErrorCode.UNAUTHENTICATED, UnauthenticatedError, S.UNAUTHENTICATED, U.UNCATEGORIZED),
        (ErrorCode.BAD_REQUEST, BadRequestError, S.INVALID_ARGUMENT, U.UNCATEGORIZED),
        (ErrorCode.UNAVAILABLE, ServiceUnavailableError, S.UNAVAILABLE, U.UNCATEGORIZED),
    ],
)
async def test_api_error_codes_map_to_exception_classes(
    code: str, cls: type[DexServiceError], status: StatusCode, sub_status: ErrorSubStatus
) -> None:
    http = _transport(_answer(code, detail="more", flow_id="f-1", retryable=True))
    with pytest.raises(cls) as info:
        await http.raw("GET", "/v1/flows/f-1")
    assert type(info.value) is cls
    assert info.value.code is status
    assert info.value.sub_status is sub_status
    assert info.value.error_code == code
    assert info.value.operation == "describe_flow"
    assert info.value.flow_id == "f-1"
    assert info.value.retryable is True
    # the server's extra text follows its message; str() is the detail, as for gRPC errors
    assert info.value.detail == f"boom {code}: more"
    assert str(info.value) == info.value.detail
    await http.aclose()


async def test_a_worker_api_error_carries_the_handler_exception() -> None:
    error = ApiError(
        code=ErrorCode.WORKER_API_ERROR,
        message="RPC 'pay' failed: LookupError: no card",
        detail="Traceback ...",
        flow_id="f-1",
        worker_error_type="LookupError",
        worker_error_detail="no card",
    )
    body = msgspec.json.encode(error)
    http = _transport(httpx.MockTransport(lambda r: httpx.Response(422, content=body)))
    with pytest.raises(WorkerInvocationError) as info:
        await http.raw("POST", "/v1/flows/f-1/rpc")
    exc = info.value
    assert (exc.code, exc.sub_status) == (S.FAILED_PRECONDITION, U.WORKER_API_ERROR)
    assert exc.operation == "invoke_rpc"
    assert exc.worker_code is S.UNKNOWN
    assert (exc.worker_error_type, exc.worker_error_detail) == ("LookupError", "no card")
    assert exc.worker_stack_trace == "Traceback ..."
    assert str(exc) == exc.detail == "RPC 'pay' failed: LookupError: no card"
    await http.aclose()


async def test_non_json_error_body_maps_by_status() -> None:
    http = _transport(httpx.MockTransport(lambda r: httpx.Response(503, text="overloaded")))
    with pytest.raises(ServiceUnavailableError, match="overloaded") as info:
        await http.raw("GET", "/v1/health")
    assert info.value.retryable
    await http.aclose()


async def test_unknown_code_is_a_plain_service_error() -> None:
    body = msgspec.json.encode(ApiError(code="SOMETHING_NEW", message="new"))
    http = _transport(httpx.MockTransport(lambda r: httpx.Response(500, content=body)))
    with pytest.raises(DexServiceError) as info:
        await http.raw("GET", "/v1/health")
    assert type(info.value) is DexServiceError
    assert info.value.error_code == "SOMETHING_NEW"
    assert info.value.code is StatusCode.UNKNOWN
    assert info.value.sub_status is ErrorSubStatus.UNCATEGORIZED
    await http.aclose()


async def test_malformed_success_body_is_an_error() -> None:
    http = _transport(httpx.MockTransport(lambda r: httpx.Response(200, text="{not json")))
    with pytest.raises(DexServiceError, match="unexpected response"):
        await http.call("GET", "/v1/flows/x", ApiError)
    await http.aclose()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_unreachable_server_raises_service_unavailable() -> None:
    options = ClientOptions(server_address=f"127.0.0.1:{_closed_port()}", timeout=2.0)
    async with AsyncClient(Registry([]), options=options) as client:
        with pytest.raises(ServiceUnavailableError) as info:
            await client.describe_flow("nope")
    assert info.value.retryable
    assert info.value.error_code == ErrorCode.UNAVAILABLE
    # what code written for gRPC status codes reads
    assert info.value.code is StatusCode.UNAVAILABLE
    assert info.value.sub_status is ErrorSubStatus.UNCATEGORIZED
    assert info.value.operation == "describe_flow"
    assert info.value.flow_id == "nope"


def test_sync_client_raises_the_same_errors() -> None:
    options = ClientOptions(server_address=f"127.0.0.1:{_closed_port()}", timeout=2.0)
    with Client(Registry([]), options=options) as client, pytest.raises(ServiceUnavailableError):
        client.health_check()


def test_addresses() -> None:
    assert http_base_url("localhost:8801") == "http://localhost:8801"
    assert http_base_url("https://dex.example:443/") == "https://dex.example:443"
    assert ws_url("localhost:8801", "/v1/worker") == "ws://localhost:8801/v1/worker"
    assert ws_url("https://dex.example", "/v1/worker") == "wss://dex.example/v1/worker"


def test_flow_status_values_match_the_wire() -> None:
    assert [s.value for s in FlowStatus] == [
        "running",
        "completed",
        "failed",
        "canceled",
        "terminated",
        "server_side_timeout_internal_only",
        "continued_as_new",
    ]
    assert not FlowStatus.RUNNING.is_closed
    assert FlowStatus.FAILED.is_closed


async def test_an_empty_flow_id_is_a_bad_request_before_any_request() -> None:
    # Without the check, "/v1/flows/" reaches the list route and fails with an HTTP 307.
    requests: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(500)

    client = AsyncClient(Registry([]))
    client._http = _transport(httpx.MockTransport(record))
    calls = [
        client.describe_flow(""),
        client.stop_flow(""),
        client.wait_for_flow("", timeout=1.0),
        client.get_history(""),
        client.get_flow_state(""),
    ]
    for call in calls:
        with pytest.raises(BadRequestError, match="flow_id must not be empty") as info:
            await call
        assert info.value.error_code == ErrorCode.BAD_REQUEST
        assert info.value.code is StatusCode.INVALID_ARGUMENT
    assert requests == []
    await client.close()


async def test_a_flow_id_over_the_limit_is_refused_before_any_request() -> None:
    requests: list[httpx.Request] = []

    def record(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(500)

    flow = make_flow(name="Tiny")
    client = AsyncClient(Registry([flow]))
    client._http = _transport(httpx.MockTransport(record))
    too_long = "é" * 513  # 513 characters, 1026 UTF-8 bytes
    calls = [
        client.start_flow(flow, too_long),
        client.describe_flow(too_long),
        client.stop_flow(too_long),
        client.wait_for_flow(too_long, timeout=1.0),
        client.get_history(too_long),
        client.get_flow_state(too_long),
    ]
    for call in calls:
        with pytest.raises(LimitExceededError) as info:
            await call
        assert str(info.value) == "flow_id is 1026 bytes, over the limit max_flow_id_bytes=1024"
        assert info.value.error_code == ErrorCode.LIMIT_EXCEEDED
    with pytest.raises(BadRequestError, match="flow_id must not be empty"):
        await client.start_flow(flow, "")
    assert requests == []
    await client.close()


def test_flow_id_check_accepts_up_to_the_limit_in_utf8_bytes() -> None:
    assert MAX_FLOW_ID_BYTES == 1024
    assert _defs.check_flow_id("x" * 1024) == "x" * 1024
    assert _defs.check_flow_id("é" * 512) == "é" * 512
    with pytest.raises(LimitExceededError, match="flow_id is 1025 bytes"):
        _defs.check_flow_id("x" * 1025)
    assert _defs.flow_segment("a/b c") == "a%2Fb%20c"


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: ClientOptions(timeout=0), "ClientOptions.timeout"),
        (lambda: ClientOptions(timeout=float("nan")), "ClientOptions.timeout"),
        (lambda: StartFlowOptions(start_delay=-1.0), "StartFlowOptions.start_delay"),
        (lambda: StartFlowOptions(start_delay=float("inf")), "StartFlowOptions.start_delay"),
        (lambda: RPCInvokeOptions(timeout=timedelta(seconds=-1)), "RPCInvokeOptions.timeout"),
        (lambda: RPCInvokeOptions(timeout=0.0), "RPCInvokeOptions.timeout"),
    ],
)
def test_option_durations_out_of_range_name_the_field(make: Any, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make()


def test_option_durations_in_range_are_kept() -> None:
    assert StartFlowOptions(start_delay=0).start_delay == 0
    assert RPCInvokeOptions(timeout=timedelta(seconds=5)).timeout == timedelta(seconds=5)
    assert ClientOptions(timeout=0.5).timeout == 0.5


def _flaky(fail_times: int, seen: list[httpx.Request]) -> httpx.MockTransport:
    """A server whose first ``fail_times`` connections drop before answering."""

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) <= fail_times:
            raise httpx.ReadError("connection closed by peer", request=request)
        return httpx.Response(200, json={"run_id": "r-1"})

    return httpx.MockTransport(handler)


async def test_idempotent_requests_are_sent_again_after_a_dropped_connection() -> None:
    seen: list[httpx.Request] = []
    transport = _transport(_flaky(2, seen))
    response = await transport.raw("GET", "/v1/flows/f-1")
    assert response.status_code == 200
    assert len(seen) == 3
    seen.clear()
    await transport.raw("POST", "/v1/flows", body={"x": 1}, idempotent=True)
    assert len(seen) == 3


async def test_other_requests_are_not_sent_twice() -> None:
    seen: list[httpx.Request] = []
    transport = _transport(_flaky(1, seen))
    with pytest.raises(ServiceUnavailableError):
        await transport.raw("POST", "/v1/flows/f-1/rpc", body={"rpc_name": "pay"})
    assert len(seen) == 1


async def test_retries_stop_after_three_attempts() -> None:
    seen: list[httpx.Request] = []
    transport = _transport(_flaky(10, seen))
    with pytest.raises(ServiceUnavailableError):
        await transport.raw("GET", "/v1/flows/f-1")
    assert len(seen) == 3


async def test_a_start_carries_one_request_id_across_resends() -> None:
    from dex import Flow, Step, StepDecision, StepList

    class Only(Step[None]):
        def execute(self, context: Any, input: None) -> StepDecision:
            return StepDecision.graceful_complete()

    class Tiny(Flow[None]):
        def get_steps(self) -> StepList[None]:
            return StepList.start_step(Only())

    flow = Tiny()
    seen: list[httpx.Request] = []
    client = AsyncClient(Registry([flow]))
    client._http = _transport(_flaky(1, seen))  # the edge under test: a dropped connection
    assert await client.start_flow(flow, "f-1") == "r-1"
    ids = {msgspec.json.decode(r.content)["request_id"] for r in seen}
    assert len(seen) == 2
    assert len(ids) == 1
    assert ids.pop() != ""
