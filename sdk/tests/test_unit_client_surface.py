"""The Client's public shapes: positional constructors, generics, options and the calls
that must fail (or succeed) before anything reaches the server.

Calls that need a server are in ``test_e2e_client_compat.py``; here a mock transport
records every request, so "refused before any request" is checked exactly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from dex import (
    ActiveStepSearchMode,
    AsyncClient,
    Attribute,
    AttributeMap,
    AttributeMatch,
    ChannelMap,
    Client,
    ClientOptions,
    Context,
    Flow,
    FlowConfig,
    FlowErrorType,
    FlowInfo,
    FlowResult,
    FlowStatus,
    FlowTimeoutHandlerOptions,
    FlowTimeoutPolicy,
    HealthInfo,
    IdReusePolicy,
    PersistenceSchema,
    Registry,
    RetryPolicy,
    RPCInvokeOptions,
    SearchFlowEntry,
    SearchFlowsPage,
    StartFlowOptions,
    Step,
    StepCompletion,
    StepDecision,
    StepDurability,
    StepExecutionId,
    StepList,
    StopFlowOptions,
    StopType,
    Stream,
    StreamMessage,
    StreamMessagesPage,
    TimerId,
    TimeTravelOptions,
    TimeTravelStepMethod,
    TimeTravelType,
    WaitForAttributeOptions,
    WaitForStepCompletionOptions,
    WorkerTarget,
    rpc,
)
from dex._client._types import error_type_of
from dex._protocol import CompletionWire
from dex._transport import HttpTransport
from dex.errors import FeatureNotAvailableError, FlowDefinitionError
from msgspec import Raw

NOTES = AttributeMap("notes", str)
BOXES = ChannelMap("boxes", str)
TITLE = Attribute("title", str)
SAID = Stream("said", str)


class Begin(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(input)


class Cleanup(Step[None]):
    def execute(self, context: Context, input: None) -> StepDecision:
        return StepDecision.graceful_complete()


class Shelf(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Begin())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(NOTES, BOXES, TITLE, SAID)

    @rpc
    def label(self, context: Context, input: str) -> str:
        return input


SHELF = Shelf()
REGISTRY = Registry([SHELF])
NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _recording_client() -> tuple[AsyncClient, list[httpx.Request]]:
    """An AsyncClient whose every request is recorded and answered by ``answer``."""
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.url.path == "/v1/flows":
            return httpx.Response(200, json={"run_id": "run-1"})
        if request.url.path.endswith("/rpc"):
            return httpx.Response(200, json={"output": "ok"})
        return httpx.Response(200, json={})

    client = AsyncClient(REGISTRY)
    http = httpx.AsyncClient(base_url="http://dex.test", transport=httpx.MockTransport(answer))
    client._http = HttpTransport("dex.test", credential=None, timeout=5.0, http=http)
    return client, requests


def _answering_client(response: httpx.Response) -> AsyncClient:
    """An AsyncClient whose every request gets ``response``."""
    client = AsyncClient(REGISTRY)
    http = httpx.AsyncClient(
        base_url="http://dex.test", transport=httpx.MockTransport(lambda _: response)
    )
    client._http = HttpTransport("dex.test", credential=None, timeout=5.0, http=http)
    return client


# --------------------------------------------------------------------------- constructors


def test_options_take_their_fields_positionally_in_the_documented_order() -> None:
    assert ClientOptions("h:1", None, "token") == ClientOptions(
        server_address="h:1", worker_target=None, credential="token"
    )
    assert ClientOptions().timeout == 30.0  # our extra, keyword only after the three
    stop = StopFlowOptions(StopType.TERMINATE, "r")
    assert (stop.type, stop.reason) == (StopType.TERMINATE, "r")
    start = StartFlowOptions(
        None, FlowTimeoutPolicy.DEFAULT, None, timedelta(seconds=5), IdReusePolicy.DISALLOW
    )
    assert start.start_delay == timedelta(seconds=5)
    assert start.id_reuse_policy is IdReusePolicy.DISALLOW
    assert start.request_id is None and start.config_override is None
    lock, load, box = NOTES.lock("a"), NOTES.load("b"), BOXES.load("c")
    invoke = RPCInvokeOptions((lock,), (load,), (box,))
    assert invoke.lock_attribute_map_instances == (lock,)
    assert invoke.load_attribute_map_instances == (load,)
    assert invoke.load_channel_map_instances == (box,)
    assert [m.name for m in IdReusePolicy] == [
        "DEFAULT",
        "ALLOW_IF_PREVIOUS_FAILED",
        "ALLOW_IF_NOT_RUNNING",
        "ALLOW_TERMINATE_IF_RUNNING",
        "DISALLOW",
    ]


def test_results_take_their_fields_positionally() -> None:
    info = FlowInfo("f", "r", "Shelf", FlowStatus.RUNNING, NOW)
    assert (info.flow_id, info.run_id, info.flow_type, info.closed_at) == ("f", "r", "Shelf", None)
    completion = StepCompletion(CompletionWire(step_type="Begin", step_execution_id="Begin-1"))
    result = FlowResult(FlowStatus.FAILED, [completion], FlowErrorType.INTERNAL, "lost")
    assert result.completions == (completion,)  # kept as a tuple
    assert (result.error_type, result.error_message) == (FlowErrorType.INTERNAL, "lost")
    message = StreamMessage("v", "t1", NOW, "#Begin-1")
    assert (message.value, message.resume_token, message.source) == ("v", "t1", "#Begin-1")
    page = StreamMessagesPage([message], "")
    assert page.next_page_token == "" and page.before_page_token is None
    assert StreamMessagesPage([], "older").before_page_token == "older"
    health = HealthInfo("SERVING", "host", 3)
    assert health.duration_seconds == 3
    entry = SearchFlowEntry("f", "r", "Shelf", FlowStatus.COMPLETED, NOW, NOW, {"k": 1})
    assert SearchFlowsPage([entry], "").flows == [entry]


def test_stream_types_and_attribute_match_are_generic() -> None:
    assert StreamMessage[str]("v", "t", NOW, "s").value == "v"
    assert StreamMessagesPage[int]([], "").messages == []
    assert AttributeMatch[int].greater_than(3) == AttributeMatch.greater_than(3)
    assert AttributeMatch.equal_to(1) != AttributeMatch.not_equal_to(1)


def test_is_terminal_excludes_running_and_continued_runs() -> None:
    terminal = {s for s in FlowStatus if FlowResult(s, ()).is_terminal}
    assert terminal == set(FlowStatus) - {FlowStatus.RUNNING, FlowStatus.CONTINUED_AS_NEW}


def test_error_types_of_the_server_codes() -> None:
    assert error_type_of("STEP_DECISION_FAILING_FLOW") is FlowErrorType.STEP_DECISION_FAILED
    assert error_type_of("CLIENT_API_FAILING_FLOW") is FlowErrorType.CLIENT_API_FAILED
    assert error_type_of("WORKER_API_FAIL") is FlowErrorType.WORKER_API_FAILED
    assert error_type_of("INVALID_USER_FLOW_CODE") is FlowErrorType.INVALID_USER_FLOW_CODE
    assert error_type_of("SERVER_RESTARTED") is FlowErrorType.INTERNAL
    assert error_type_of(None) is None


def test_a_completion_decodes_with_the_decoder_it_was_given() -> None:
    seen: list[object] = []

    def decoder(tp: object) -> Any:
        seen.append(tp)
        return REGISTRY.codec_for(tp)

    wire = CompletionWire(step_type="Begin", step_execution_id="Begin-1", output=Raw(b'"out"'))
    completion = StepCompletion(wire, decoder)
    assert completion.decode(str) == "out" and completion.output_as(str) == "out"
    assert seen == [str, str]
    assert FlowResult(FlowStatus.COMPLETED, [completion]).single_output(str) == "out"


def test_values_of_features_not_run_yet_have_their_documented_shapes() -> None:
    config = FlowConfig(step_durability=StepDurability.ASYNC)
    assert config.step_durability is StepDurability.ASYNC and config.worker_target is None
    assert FlowConfig(ActiveStepSearchMode.ALL).active_step_search_mode is ActiveStepSearchMode.ALL
    travel = TimeTravelOptions(TimeTravelType.STEP_TYPE, None, "Begin", None)
    assert travel.step_type == "Begin" and travel.step_method is None
    assert [m.value for m in TimeTravelStepMethod] == ["wait_for", "execute"]
    assert [m.name for m in FlowTimeoutPolicy] == ["DEFAULT", "FAIL", "CANCEL", "HANDLER"]
    handler = FlowTimeoutHandlerOptions(timedelta(seconds=1)).on_failure_proceed_to(Cleanup)
    assert handler.method_timeout == timedelta(seconds=1) and handler._failure_target is Cleanup
    waits = WaitForStepCompletionOptions("req", timedelta(seconds=2))
    assert (waits.request_id, waits.request_timeout) == ("req", timedelta(seconds=2))
    assert WaitForAttributeOptions().internal_handler_timeout == timedelta(0)
    assert StepExecutionId("Begin") == StepExecutionId("Begin", 1)
    assert str(StepExecutionId("Begin", 3)) == "Begin-3"
    assert TimerId.by_condition_id("c") == TimerId("c")
    assert TimerId.by_condition_index(0) == TimerId(None, 0)
    for selectors in ((None, None), ("c", 0)):
        with pytest.raises(ValueError, match="exactly one"):
            TimerId(*selectors)
    assert WorkerTarget("h:1", True) == WorkerTarget(address="h:1", headless=True, pull=False)


def test_with_attribute_takes_an_attribute_value_or_a_map_key_value() -> None:
    options = StartFlowOptions().with_attribute(TITLE, "t").with_attribute(NOTES, "k", "v")
    assert [(i.attribute, i.key, i.value) for i in options.initial_attributes] == [
        (TITLE, None, "t"),
        (NOTES, "k", "v"),
    ]
    assert options._attribute_initializations == options.initial_attributes
    assert StartFlowOptions().with_attribute_map(NOTES, "k", "v").initial_attributes == (
        StartFlowOptions().with_attribute(NOTES, "k", "v").initial_attributes
    )
    with pytest.raises(TypeError, match="key and a value"):
        StartFlowOptions().with_attribute(NOTES, "v")
    with pytest.raises(TypeError, match="one value"):
        StartFlowOptions().with_attribute(TITLE, "k", "v")


# --------------------------------------------------------------------------- the Client object


def test_none_options_mean_the_defaults_and_the_client_exposes_what_it_was_built_with() -> None:
    with Client(REGISTRY, None, None) as client:
        assert client.registry is REGISTRY
        assert client.blob_cache is None
        assert client.options == ClientOptions()
    client.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        client.describe_flow("f")
    async_client = AsyncClient(REGISTRY, None, None)
    assert async_client.options == ClientOptions() and async_client.registry is REGISTRY


async def test_context_managers_take_the_documented_exit_parameter_names() -> None:
    # code written for the documented API may pass them by keyword
    names: dict[str, Any] = {"exception_type": None, "exception": None, "traceback": None}
    client = AsyncClient(REGISTRY)
    await getattr(client, "__aexit__")(**names)  # noqa: B009 - keyword call, checked at run time
    sync = Client(REGISTRY)
    getattr(sync, "__exit__")(**names)  # noqa: B009
    with pytest.raises(RuntimeError):
        sync.health_check()


def test_a_listening_worker_target_is_not_available_but_a_pull_target_is() -> None:
    with pytest.raises(FeatureNotAvailableError, match="listening Workers"):
        AsyncClient(REGISTRY, None, ClientOptions(worker_target=WorkerTarget("host:8803")))
    with Client(REGISTRY, None, ClientOptions(worker_target=WorkerTarget(pull=True))) as client:
        assert client.options.worker_target == WorkerTarget(pull=True)


# --------------------------------------------------------------------------- before any request


async def test_start_flow_refuses_an_instance_the_registry_does_not_hold() -> None:
    client, requests = _recording_client()
    with pytest.raises(FlowDefinitionError, match="Flow instance is not registered: Shelf"):
        await client.start_flow(Shelf(), "f", "x")

    class Other(Shelf):
        def get_flow_type(self) -> str:
            return "Other"

    with pytest.raises(FlowDefinitionError, match="Flow is not registered: Other"):
        await client.start_flow(Other(), "f", "x")
    with pytest.raises(FlowDefinitionError, match="RPC method is not registered"):
        await client.invoke_rpc(Shelf().label, "f", "x")
    assert requests == []
    assert await client.start_flow(SHELF, "f", "x") == "run-1"
    assert len(requests) == 1
    await client.close()


StartOptions = Callable[[], StartFlowOptions]


@pytest.mark.parametrize(
    ("make", "feature"),
    [
        (lambda: StartFlowOptions(timeout=timedelta(minutes=5)), "Flow timeouts"),
        (lambda: StartFlowOptions(timeout_policy=FlowTimeoutPolicy.FAIL), "Flow timeouts"),
        (
            lambda: StartFlowOptions(timeout_handler_options=FlowTimeoutHandlerOptions()),
            "Flow timeouts",
        ),
        (lambda: StartFlowOptions(retry_policy=RetryPolicy()), "Flow retries"),
        (
            lambda: StartFlowOptions(config_override=FlowConfig(continue_as_new_threshold=10)),
            "Flow configuration",
        ),
        (
            lambda: StartFlowOptions(config_override=FlowConfig(worker_target=WorkerTarget("h:1"))),
            "listening Workers",
        ),
    ],
)
async def test_a_start_names_the_features_it_needs_and_a_refusal_raises(
    make: StartOptions, feature: str
) -> None:
    client, requests = _recording_client()
    await client.start_flow(SHELF, "f", "x", make())
    (request,) = requests
    (required,) = json.loads(request.content)["requires"]
    assert feature in required
    await client.close()
    refused = {"code": "FEATURE_NOT_AVAILABLE", "message": "no", "detail": required}
    client = _answering_client(httpx.Response(422, json=refused))
    with pytest.raises(FeatureNotAvailableError, match=feature) as raised:
        await client.start_flow(SHELF, "f", "x", make())
    assert isinstance(raised.value, NotImplementedError)
    assert raised.value.feature == required
    await client.close()


async def test_start_options_this_release_runs_are_sent() -> None:
    client, requests = _recording_client()
    options = StartFlowOptions(
        config_override=FlowConfig(
            step_durability=StepDurability.ASYNC, worker_target=WorkerTarget(pull=True)
        ),
        request_id=None,
        ignore_already_started=True,
    )
    await client.start_flow(SHELF, "f", "x", options)
    (request,) = requests
    body = json.loads(request.content)
    assert body["request_id"]  # None: a random idempotency key
    assert body["ignore_already_started"] is True
    assert body["config"] == {"step_durability": "async", "worker_target": {"pull": True}}
    await client.close()


async def test_client_calls_of_features_not_run_yet_fail_before_any_request() -> None:
    client, requests = _recording_client()
    calls = [
        client.time_travel("f", TimeTravelOptions(TimeTravelType.BEGINNING)),
        client.trigger_continue_as_new("f"),
    ]
    for call in calls:
        with pytest.raises(FeatureNotAvailableError):
            await call
    assert requests == []
    await client.close()


def test_search_flows_sends_its_query_and_a_refusal_raises() -> None:
    refused = {"code": "FEATURE_NOT_AVAILABLE", "message": "no", "detail": "Flow search"}
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(422, json=refused)

    with Client(REGISTRY) as sync:
        http = httpx.AsyncClient(base_url="http://dex.test", transport=httpx.MockTransport(answer))
        sync._async._http = HttpTransport("dex.test", credential=None, timeout=5.0, http=http)
        with pytest.raises(FeatureNotAvailableError, match="search"):
            sync.search_flows("q", 10, "", include_continued_as_new=True)
    (request,) = seen
    assert request.url.params["query"] == "q"


async def test_invoke_rpc_sends_none_as_null_and_map_instances_by_physical_name() -> None:
    client, requests = _recording_client()
    options = RPCInvokeOptions((NOTES.lock("a"),), (NOTES.load("b"),), (BOXES.load("c"),))
    assert await client.invoke_rpc(rpc_method=SHELF.label, flow_id="f", input=None) == "ok"
    await client.invoke_rpc(SHELF.label, "f", "x", options=options)
    await client.invoke_rpc(SHELF.label, "f", "x", options=RPCInvokeOptions(((NOTES, "p"),)))
    first, second, third = (json.loads(r.content) for r in requests)
    assert "input" in first and first["input"] is None
    assert second["extra_locks"] == ["notes/a"]
    assert second["extra_loads"] == {
        "attribute_map_instances": ["notes/b"],
        "channel_map_instances": ["boxes/c"],
    }
    assert third["extra_locks"] == ["notes/p"]
    await client.close()


async def test_wait_timeouts_take_timedelta_and_refuse_negative_ones() -> None:
    client, requests = _recording_client()
    with pytest.raises(ValueError, match="non-negative"):
        await client.wait_for_flow("f", timedelta(seconds=-1))
    with pytest.raises(ValueError, match="non-negative"):
        await client.read_stream("f", SAID, "", timedelta(seconds=-1))
    assert requests == []
    await client.close()


async def test_health_check_is_a_bool_and_get_health_gives_the_details() -> None:
    def degraded(request: httpx.Request) -> httpx.Response:
        body = {"ok": False, "version": "1", "store": "sqlite", "status": "degraded"}
        return httpx.Response(200, json={**body, "reason": "store down"})

    client = AsyncClient(REGISTRY)
    http = httpx.AsyncClient(base_url="http://dex.test", transport=httpx.MockTransport(degraded))
    client._http = HttpTransport("dex.test", credential=None, timeout=5.0, http=http)
    assert await client.health_check() is False
    details = await client.get_health()
    assert (details.status, details.reason) == ("degraded", "store down")
    await client.close()


async def test_a_credential_object_is_asked_for_its_token_before_each_request() -> None:
    class Rotating:
        def __init__(self) -> None:
            self.calls = 0

        def token(self) -> str:
            self.calls += 1
            return f"t{self.calls}"

    class Awaited:
        async def _value(self) -> str:
            return "awaited"

        def token(self) -> Any:
            return self._value()

    seen: list[str | None] = []

    def record(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return httpx.Response(200, json={"ok": True, "version": "1", "store": "sqlite"})

    for credential in (Rotating(), Awaited()):
        transport = HttpTransport(
            "dex.test",
            credential=credential,
            timeout=5.0,
            http=httpx.AsyncClient(
                base_url="http://dex.test", transport=httpx.MockTransport(record)
            ),
        )
        await transport.raw("GET", "/v1/health")
        await transport.raw("GET", "/v1/health")
        await transport.aclose()
    assert seen == [
        "Bearer t1",
        "Bearer t2",
        "Bearer awaited",
        "Bearer awaited",
    ]


async def test_step_calls_refuse_a_bad_step_execution_id_before_any_request() -> None:
    client, requests = _recording_client()
    for bad in (StepExecutionId("", 1), StepExecutionId("Begin", 0)):
        with pytest.raises(ValueError, match="StepExecutionId"):
            await client.skip_timer("f", bad, TimerId.by_condition_index(0))
        with pytest.raises(ValueError, match="StepExecutionId"):
            await client.wait_for_step_completion("f", bad, WaitForStepCompletionOptions())
    with pytest.raises(ValueError, match="negative"):
        await client.wait_for_step_completion(
            "f",
            StepExecutionId("Begin"),
            WaitForStepCompletionOptions(request_timeout=timedelta(seconds=-1)),
        )
    assert requests == []
    await client.close()
