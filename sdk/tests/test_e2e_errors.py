"""End to end: bad input gets a typed error and changes nothing; retention deletes closed
Flows with their blobs; a server with a token rejects Clients and Workers without it."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import httpx
import msgspec
import pytest
import pytest_asyncio
from dex import FlowErrorType, FlowStatus
from dex._codec import codec_for
from dex._protocol import (
    MAX_FLOW_ID_BYTES,
    ApiError,
    FlowSpec,
    InvokeRpcRequest,
    Register,
    RegisterRejected,
    StartFlowRequest,
    encoder,
    server_frame_decoder,
)
from dex._spec import flow_spec
from dex.errors import (
    BadRequestError,
    ErrorSubStatus,
    FlowAlreadyStartedError,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    LimitExceededError,
    StatusCode,
    UnauthenticatedError,
    ValueMappingError,
    WorkerInvocationError,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from tests.e2e_flows import error_flows, rpc_flows, step_flows
from tests.e2e_flows.harness import Stack, e2e_stack, history, payload, unique_id
from tests.e2e_flows.step_flows import Trace
from tests.support import async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

MAX_VALUE_BYTES = 64 * 1024


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    directory = tmp_path_factory.mktemp("e2e-errors")
    async with e2e_stack(directory, max_value_bytes=MAX_VALUE_BYTES) as running:
        yield running


def _api_error(response: httpx.Response) -> ApiError:
    return msgspec.json.decode(response.content, type=ApiError)


async def _absent(stack: Stack, flow_id: str) -> None:
    with pytest.raises(FlowNotFoundError):
        await stack.client.describe_flow(flow_id)


# --------------------------------------------------------------------------- bad input


async def test_unknown_flow_id(stack: Stack) -> None:
    flow_id = unique_id("nobody")
    with pytest.raises(FlowNotFoundError):
        await stack.client.describe_flow(flow_id)
    with pytest.raises(FlowNotFoundError):
        await stack.client.wait_for_flow(flow_id, timeout=1)
    with pytest.raises(FlowNotFoundError):
        await stack.client.get_history(flow_id)
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.invoke_rpc(rpc_flows.RPC_FLOW.echo, flow_id, "x")
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.stop_flow(flow_id)


async def test_service_errors_carry_status_sub_status_and_operation(stack: Stack) -> None:
    flow_id = unique_id("nobody")
    with pytest.raises(FlowNotFoundError) as missing:
        await stack.client.describe_flow(flow_id)
    error = missing.value
    assert isinstance(error, RuntimeError)
    assert (error.code, error.sub_status) == (StatusCode.NOT_FOUND, ErrorSubStatus.FLOW_NOT_EXISTS)
    assert (error.operation, error.flow_id) == ("describe_flow", flow_id)
    assert error.error_code == "FLOW_NOT_FOUND" and not error.retryable
    assert str(error) == error.detail and flow_id in error.detail

    with pytest.raises(FlowNotActiveOrNotFoundError) as closed:
        await stack.client.stop_flow(flow_id)
    assert closed.value.code is StatusCode.FAILED_PRECONDITION
    assert closed.value.operation == "stop_flow"

    running = unique_id("rpc-fails")
    await stack.client.start_flow(rpc_flows.RPC_FLOW, running)
    with pytest.raises(WorkerInvocationError) as raised:
        await stack.client.invoke_rpc(rpc_flows.RPC_FLOW.fail, running, "oops")
    failed = raised.value
    assert (failed.code, failed.sub_status) == (
        StatusCode.FAILED_PRECONDITION,
        ErrorSubStatus.WORKER_API_ERROR,
    )
    assert (failed.operation, failed.flow_id) == ("invoke_rpc", running)
    assert failed.worker_code is StatusCode.UNKNOWN
    assert failed.worker_error_type == "LookupError"
    assert failed.worker_error_detail == "rpc failed on purpose: oops"
    assert "LookupError" in (failed.worker_stack_trace or "")
    await stack.client.stop_flow(running)


async def test_a_step_raising_retry_after_is_retried_after_its_delay(stack: Stack) -> None:
    # The Step's policy waits 10 minutes between attempts: the Flow ends in time only if
    # the 1 s of retry_after replaces it. The failure recorded is the cause, not the wrapper.
    flow_id = unique_id("retry-after")
    await stack.client.start_flow(error_flows.RETRY_LATER, flow_id, "x")
    result = await stack.client.wait_for_flow(flow_id, timeout=30)
    last = result.single_output(error_flows.LastFailure)
    assert last.error_type == "ValueError"
    assert "busy on attempt 2" in (last.detail or "")


async def test_unknown_flow_type_and_unknown_rpc(stack: Stack) -> None:
    flow_id = unique_id("ghost")
    spec = flow_spec(step_flows.SEQUENTIAL)
    request = StartFlowRequest(flow_type="NoSuchFlowType", flow_id=flow_id, spec=spec)
    async with httpx.AsyncClient(base_url=stack.server.url) as http:
        response = await http.post("/v1/flows", content=msgspec.json.encode(request))
        assert response.status_code == 400, response.text
        assert _api_error(response).code == "UNKNOWN_FLOW_TYPE"
        await _absent(stack, flow_id)

        running = unique_id("has-rpcs")
        await stack.client.start_flow(rpc_flows.RPC_FLOW, running)
        call = InvokeRpcRequest(rpc_name="no_such_rpc")
        response = await http.post(f"/v1/flows/{running}/rpc", content=msgspec.json.encode(call))
        assert response.status_code == 400, response.text
        assert _api_error(response).code == "UNKNOWN_RPC"
        await stack.client.stop_flow(running)


async def test_running_duplicate_flow_id_is_rejected_and_unchanged(stack: Stack) -> None:
    flow_id = unique_id("dup")
    run_id = await stack.client.start_flow(rpc_flows.RPC_FLOW, flow_id)
    with pytest.raises(FlowAlreadyStartedError):
        await stack.client.start_flow(rpc_flows.RPC_FLOW, flow_id)
    info = await stack.client.describe_flow(flow_id)
    assert (info.run_id, info.status) == (run_id, FlowStatus.RUNNING)
    events = await history(stack.client, flow_id)
    assert [e.type for e in events].count("FlowStarted") == 1
    await stack.client.stop_flow(flow_id)


async def test_oversized_payload_is_rejected_and_nothing_is_created(stack: Stack) -> None:
    flow_id = unique_id("huge")
    with pytest.raises(LimitExceededError) as raised:
        await stack.client.start_flow(error_flows.KEEPER, flow_id, "x" * (MAX_VALUE_BYTES * 2))
    assert str(MAX_VALUE_BYTES) in f"{raised.value} {raised.value.detail}"
    await _absent(stack, flow_id)


async def test_malformed_page_token_is_a_bad_request_like_history(stack: Stack) -> None:
    started = [unique_id(f"paged-{n}") for n in range(3)]
    for flow_id in started:
        await stack.client.start_flow(rpc_flows.RPC_FLOW, flow_id)
    first = await stack.client.list_flows(page_size=2)
    assert len(first.flows) == 2 and first.next_page_token
    second = await stack.client.list_flows(page_size=2, page_token=first.next_page_token)
    assert second.flows and second.flows[0].run_id < first.flows[-1].run_id

    with pytest.raises(BadRequestError) as listed:
        await stack.client.list_flows(page_token="not-a-token")
    assert listed.value.error_code == "BAD_REQUEST"
    assert listed.value.code == StatusCode.INVALID_ARGUMENT
    assert "bad page_token 'not-a-token'" in str(listed.value)
    with pytest.raises(BadRequestError) as paged:
        await stack.client.get_history(first.flows[0].flow_id, page_token="not-a-token")
    assert type(listed.value) is type(paged.value)
    for bad in (first.next_page_token.upper(), first.next_page_token + "0", "2024"):
        with pytest.raises(BadRequestError):
            await stack.client.list_flows(page_token=bad)
    for flow_id in started:
        await stack.client.stop_flow(flow_id)


async def test_flow_id_over_the_limit_is_rejected_and_nothing_is_created(stack: Stack) -> None:
    prefix = unique_id("long")
    longest = prefix + "é" * ((1024 - len(prefix)) // 2) + "x" * ((1024 - len(prefix)) % 2)
    assert len(longest.encode()) == MAX_FLOW_ID_BYTES == 1024
    too_long = longest + "x"

    # the SDK refuses it before sending anything ...
    with pytest.raises(LimitExceededError) as raised:
        await stack.client.start_flow(error_flows.KEEPER, too_long, "v")
    assert "over the limit max_flow_id_bytes=1024" in str(raised.value)
    # ... and the server refuses it from any client, storing nothing
    request = StartFlowRequest(
        flow_type="Keeper",
        flow_id=too_long,
        spec=flow_spec(error_flows.KEEPER),
        input=msgspec.Raw(b'"v"'),
    )
    async with httpx.AsyncClient(base_url=stack.server.url) as http:
        response = await http.post("/v1/flows", content=msgspec.json.encode(request))
        assert response.status_code == 413, response.text
        error = _api_error(response)
        assert error.code == "LIMIT_EXCEEDED"
        assert error.message == "flow_id is 1025 bytes, over the limit max_flow_id_bytes=1024"
        # no Flow can have that ID: a lookup names the limit too
        response = await http.get(f"/v1/flows/{quote(too_long, safe='')}")
        assert response.status_code == 413 and "max_flow_id_bytes=1024" in response.text

    # the longest accepted ID runs through server and Worker like any other
    await stack.client.start_flow(error_flows.KEEPER, longest, "v")
    result = await stack.client.wait_for_flow(longest, timeout=20)
    assert result.single_output(int) == 1
    listed = [f.flow_id for f in (await stack.client.list_flows(flow_type="Keeper")).flows]
    assert longest in listed and too_long not in listed


async def test_malformed_json_to_the_api(stack: Stack) -> None:
    async with httpx.AsyncClient(base_url=stack.server.url) as http:
        response = await http.post("/v1/flows", content=b'{"flow_type": "Sequential",')
        assert response.status_code == 400
        assert _api_error(response).code == "BAD_REQUEST"

        response = await http.post("/v1/flows", content=b'{"flow_type": "Sequential"}')
        assert response.status_code == 400
        error = _api_error(response)
        assert error.code == "BAD_REQUEST"
        assert "flow_id" in f"{error.message} {error.detail}"

        response = await http.get("/v1/flows/x/history", params={"page_size": "many"})
        assert response.status_code in (400, 404)


async def test_value_not_matching_the_declared_type(stack: Stack) -> None:
    flow_id = unique_id("mistyped")
    with pytest.raises(ValueMappingError):
        await stack.client.start_flow(step_flows.SEQUENTIAL, flow_id, "not an int")
    await _absent(stack, flow_id)

    running = unique_id("mistyped-rpc")
    await stack.client.start_flow(rpc_flows.RPC_FLOW, running)
    with pytest.raises(ValueMappingError):
        await stack.client.invoke_rpc(rpc_flows.RPC_FLOW.echo, running, 123)
    with pytest.raises(ValueMappingError):
        await stack.client.invoke_rpc(rpc_flows.RPC_FLOW.park_steps, running, "three")
    assert (await stack.client.describe_flow(running)).status is FlowStatus.RUNNING
    await stack.client.stop_flow(running)

    flow_id = unique_id("typed-ok")
    await stack.client.start_flow(step_flows.SEQUENTIAL, flow_id, 0)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(Trace).value == 2


async def test_decision_naming_an_unregistered_step_commits_nothing(stack: Stack) -> None:
    flow_id = unique_id("astray")
    await stack.client.start_flow(error_flows.STRAY_DECISION, flow_id, 7)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)

    assert result.status is FlowStatus.FAILED
    assert result.error_type in (
        FlowErrorType.INVALID_USER_FLOW_CODE,
        FlowErrorType.WORKER_API_FAILED,
    )
    assert "Unregistered" in (result.error_message or "")
    # the attempt's Attribute write was not committed
    assert await stack.client.invoke_rpc(error_flows.STRAY_DECISION.mark, flow_id) == 0
    events = await history(stack.client, flow_id)
    assert "StepExecuteCompleted" not in [e.type for e in events]


# --------------------------------------------------------------------------- retention


async def test_closed_flow_is_readable_until_retention_then_gone_with_its_blobs(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path, retention_s=2.0, retention_sweep_interval_s=0.2) as stack:
        client = stack.client
        flow_id = unique_id("retained")
        value = "r" * 10_000  # above the 2 KiB blob threshold
        await client.start_flow(error_flows.KEEPER, flow_id, value)
        result = await client.wait_for_flow(flow_id, timeout=20)
        assert result.single_output(int) == len(value)

        blob = hashlib.sha256(codec_for(str).encode(value)).hexdigest()
        async with httpx.AsyncClient(base_url=stack.server.url) as http:
            assert (await http.get(f"/v1/blobs/{blob}")).content == codec_for(str).encode(value)

            assert (await client.describe_flow(flow_id)).status is FlowStatus.COMPLETED
            assert [e.type for e in await history(client, flow_id)][-1] == "FlowClosed"
            assert await client.invoke_rpc(error_flows.KEEPER.size, flow_id) == len(value)
            with pytest.raises(FlowNotActiveOrNotFoundError):
                await client.invoke_rpc(error_flows.KEEPER.touch, flow_id)

            async def deleted() -> bool:
                try:
                    await client.describe_flow(flow_id)
                except FlowNotFoundError:
                    return True
                return False

            await async_wait_until("retention deleted the Flow", deleted, timeout=15)
            with pytest.raises(FlowNotFoundError):
                await client.get_history(flow_id)
            with pytest.raises(FlowNotFoundError):
                await client.wait_for_flow(flow_id, timeout=1)
            with pytest.raises(FlowNotActiveOrNotFoundError):
                await client.invoke_rpc(error_flows.KEEPER.size, flow_id)
            assert (await http.get(f"/v1/blobs/{blob}")).status_code == 404
            listed = await client.list_flows(flow_type="Keeper")
            assert flow_id not in [f.flow_id for f in listed.flows]


# --------------------------------------------------------------------------- auth


async def test_server_with_token_rejects_clients_and_workers_without_it(tmp_path: Path) -> None:
    token = "e2e-secret-token"
    async with e2e_stack(tmp_path, token=token) as stack:
        flow_id = unique_id("auth")
        for credential in (None, "wrong-token"):
            async with stack.client_for(credential) as outsider:
                with pytest.raises(UnauthenticatedError):
                    await outsider.start_flow(step_flows.SEQUENTIAL, flow_id, 1)
                with pytest.raises(UnauthenticatedError):
                    await outsider.describe_flow(flow_id)
                assert await outsider.health_check() is True
        await _absent(stack, flow_id)

        async with httpx.AsyncClient(base_url=stack.server.url) as http:
            response = await http.get("/v1/flows")
            assert response.status_code == 401
            assert _api_error(response).code == "UNAUTHENTICATED"

        assert await _worker_rejected(stack.server.address, None)
        assert await _worker_rejected(stack.server.address, "wrong-token")

        # the Worker child started with the token serves Flows started with it
        await stack.client.start_flow(step_flows.SEQUENTIAL, flow_id, 1)
        result = await stack.client.wait_for_flow(flow_id, timeout=20)
        assert result.single_output(Trace).value == 4


async def _worker_rejected(address: str, token: str | None) -> bool:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    register = Register(
        app_worker_id="intruder", flows=[], max_concurrent_tasks=1, reserved_rpc_tasks=0
    )
    try:
        async with connect(f"ws://{address}/v1/worker", additional_headers=headers) as ws:
            await ws.send(msgspec.json.encode(register).decode())
            frame = server_frame_decoder.decode(await ws.recv())
            return isinstance(frame, RegisterRejected) and frame.code == "UNAUTHENTICATED"
    except InvalidStatus as exc:
        return exc.response.status_code in (401, 403)
    except ConnectionClosed:
        return True


async def test_a_start_without_its_input_fails_at_once(stack: Stack) -> None:
    """A raw start of an int Step without input: the attempt cannot map it, and no retry
    could, so the Flow fails at once instead of retrying under the default policy."""
    flow_id = unique_id("no-input")
    body = StartFlowRequest(flow_type="Typed", flow_id=flow_id, spec=FlowSpec(flow_type="Typed"))
    async with httpx.AsyncClient(base_url=stack.server.url) as http:
        response = await http.post("/v1/flows", content=encoder.encode(body))
        assert response.status_code == 200, response.text
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.FAILED
    assert (result.error_message or "").startswith("Cannot decode Dex Value")
    events = await history(stack.client, flow_id)
    (closed,) = [payload(e) for e in events if e.type == "FlowClosed"]
    assert "Counted-1 execute failed: ValueMappingError" in closed["errorDetail"]
    failed = [e for e in events if e.type == "StepExecuteFailed"]
    assert [payload(e)["output"]["failure"]["attempt"] for e in failed] == [1]


async def test_a_movement_input_of_the_wrong_type_fails_at_once(stack: Stack) -> None:
    flow_id = unique_id("mistyped-move")
    await stack.client.start_flow(error_flows.MISTYPED_MOVE, flow_id, "seven")
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.FAILED
    assert (result.error_message or "").startswith("Cannot encode Dex Value")
    events = await history(stack.client, flow_id)
    (closed,) = [payload(e) for e in events if e.type == "FlowClosed"]
    assert "Mistype-1 execute failed: ValueMappingError" in closed["errorDetail"]
    failed = [e for e in events if e.type == "StepExecuteFailed"]
    assert [payload(e)["output"]["failure"]["attempt"] for e in failed] == [1]
