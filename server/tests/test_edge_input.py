"""Hostile input at the HTTP edge: IDs of any characters, NUL bytes, limits, bad numbers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dex import AsyncClient, ClientOptions, Registry
from dex._client._defs import quote_segment
from dex._protocol import (
    FlowSpec,
    InitialAttribute,
    StartFlowRequest,
    StateDecl,
    StepSpec,
    StopFlowRequest,
    StreamWriteRequest,
    encoder,
)
from dex._state._common import instance_key, instance_name
from dex.errors import DexServiceError, FlowNotFoundError
from dex_server.testing import RunningServer, running_server
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests._pg import db_url, needs_postgres
from tests._rawworker import raw

Q = quote_segment
__all__ = ["db_url"]  # a fixture


def _spec(stream: str = "out") -> FlowSpec:
    return FlowSpec(
        flow_type="Talker",
        start_step="A",
        steps=[StepSpec(step_type="A")],
        state=[
            StateDecl(name=stream, kind="stream"),
            StateDecl(name="m", kind="attribute_map"),
            StateDecl(name="a", kind="attribute"),
        ],
    )


def _start(flow_id: str, **kw: Any) -> bytes:
    kw.setdefault("spec", _spec())
    return encoder.encode(StartFlowRequest(flow_type="Talker", flow_id=flow_id, **kw))


# any text a client may use as an ID: no NUL (refused) and no lone surrogate (not UTF-8)
ids = st.text(
    alphabet=st.characters(exclude_categories=["Cs"], exclude_characters="\x00"),
    min_size=1,
    max_size=24,
) | st.sampled_from([".", "..", "a/b", "../x", "%2F", "%", "a/", "/", "x/next", "é/ß"])


# a Stream name is a state name: declared once, and without "/" (the schema refuses both)
stream_names = ids.filter(lambda s: "/" not in s and s not in ("a", "m"))


def _run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    srv = RunningServer(tmp_path_factory.mktemp("edge"), {"fsync": False})
    _run(srv.start())
    try:
        yield srv
    finally:
        _run(srv.stop())


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(flow_id=ids, stream=stream_names, key=ids)
def test_any_id_round_trips_through_http_and_sdk(
    server: RunningServer, flow_id: str, stream: str, key: str
) -> None:
    with httpx.Client(base_url=server.url) as http:
        spec = _spec(stream)
        attr = instance_name("m", key)
        start = _start(
            flow_id,
            spec=spec,
            id_reuse_policy="allow_terminate_if_running",
            initial_attributes=[InitialAttribute(name=attr, value=raw(key))],
        )
        r = http.post("/v1/flows", content=start)
        assert r.status_code == 200, r.text
        run_id = r.json()["run_id"]
        r = http.get(f"/v1/flows/{Q(flow_id)}")
        assert r.status_code == 200, r.text
        assert r.json()["flow_id"] == flow_id and r.json()["run_id"] == run_id
        state = http.get(f"/v1/flows/{Q(flow_id)}/state").json()
        assert state["info"]["flow_id"] == flow_id
        values = http.post(
            f"/v1/flows/{Q(flow_id)}/attributes", content=json.dumps({"maps": ["m"]})
        ).json()["values"]
        assert values == {attr: key} and instance_key(attr) == key
        base = f"/v1/streams/Talker/{Q(stream)}/{Q(flow_id)}"
        write = encoder.encode(StreamWriteRequest(source=key, value=raw([flow_id, stream])))
        assert http.post(base, content=write).status_code == 200
        messages = http.get(base).json()["messages"]
        assert messages[0]["value"] == [flow_id, stream] and messages[0]["source"] == key
        nxt = http.get(f"{base}/next", params={"timeout_s": 0}).json()["message"]
        assert nxt["value"] == messages[-1]["value"]

    async def through_sdk() -> None:
        options = ClientOptions(server_address=server.address)
        async with AsyncClient(Registry([]), options=options) as client:
            info = await client.describe_flow(flow_id)
            assert info.flow_id == flow_id
            assert (await client.get_flow_state(flow_id)).info.flow_id == flow_id
            with pytest.raises(FlowNotFoundError):
                await client.describe_flow(flow_id + "/state")

    _run(through_sdk())


@pytest.fixture
async def http(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url) as client,
    ):
        yield client


async def test_an_id_with_a_slash_never_reaches_another_flow(http: httpx.AsyncClient) -> None:
    assert (await http.post("/v1/flows", content=_start("victim"))).status_code == 200
    assert (await http.post("/v1/flows", content=_start("x"))).status_code == 200
    for path in ("/v1/flows/victim%2Fstate", "/v1/flows/victim%2Fstate/state"):
        r = await http.get(path)
        assert r.status_code == 404 and r.json()["code"] == "FLOW_NOT_FOUND", path
        assert r.json()["flow_id"] == "victim/state"
    write = encoder.encode(StreamWriteRequest(source="s", value=raw("x's message")))
    assert (await http.post("/v1/streams/Talker/out/x", content=write)).status_code == 200
    assert len((await http.get("/v1/streams/Talker/out/x")).json()["messages"]) == 1
    # the Stream of Flow "x/next" is empty: the path is not Flow x's long poll
    r = await http.get("/v1/streams/Talker/out/x%2Fnext")
    assert r.status_code == 200 and r.json()["messages"] == []
    r = await http.get("/v1/streams/Talker/out/x%2Fnext/next", params={"timeout_s": 0})
    assert r.json().get("message") is None
    # dot segments are IDs like any other
    for fid in (".", ".."):
        assert (await http.post("/v1/flows", content=_start(fid))).status_code == 200
        r = await http.get(f"/v1/flows/{Q(fid)}/state")
        assert r.json()["info"]["flow_id"] == fid
    # an empty segment is no route, with an ApiError body
    r = await http.get("/v1/flows//state")
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


async def test_unknown_routes_and_methods_answer_an_api_error(http: httpx.AsyncClient) -> None:
    r = await http.get("/v2/nothing")
    assert r.status_code == 404
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {"code": "NOT_FOUND", "message": "no such route"}
    r = await http.delete("/v1/flows")
    assert r.status_code == 405 and r.json()["code"] == "METHOD_NOT_ALLOWED"
    assert r.headers["allow"] == "GET, HEAD, POST"
    r = await http.put("/v1/flows/x/stop")
    assert r.status_code == 405 and r.headers["allow"] == "POST"
    r = await http.get("/v1/flows/")  # a trailing slash is another path, not a redirect
    assert r.status_code == 404 and r.json()["code"] == "NOT_FOUND"


async def test_sdk_maps_only_a_flow_lookup_miss_to_flow_not_found(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        # a wrong base URL: the 404 is the server's "no such route", not a missing Flow
        options = ClientOptions(server_address=f"{srv.url}/nothing")
        async with AsyncClient(Registry([]), options=options) as client:
            with pytest.raises(DexServiceError) as caught:
                await client.describe_flow("f")
            assert not isinstance(caught.value, FlowNotFoundError)
            assert caught.value.error_code == "NOT_FOUND"
        options = ClientOptions(server_address=srv.address)
        async with AsyncClient(Registry([]), options=options) as client:
            with pytest.raises(FlowNotFoundError):
                await client.describe_flow("f")


async def test_bearer_scheme_is_case_insensitive(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, token="s3cret") as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        for header in ("Bearer s3cret", "bearer s3cret", "BEARER s3cret", "Bearer   s3cret"):
            r = await http.get("/v1/flows", headers={"Authorization": header})
            assert r.status_code == 200, header
        for header in ("Bearer s3cre", "Basic s3cret", "Bearers3cret", "s3cret", "bearer"):
            r = await http.get("/v1/flows", headers={"Authorization": header})
            assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED", header
        # a path that only decodes to /v1/health is not the health route
        r = await http.get("/v1%2Fhealth")
        assert r.status_code == 401


async def test_bad_numbers_deep_json_and_huge_tokens_are_bad_requests(
    http: httpx.AsyncClient,
) -> None:
    assert (await http.post("/v1/flows", content=_start("f"))).status_code == 200
    bad = ["nan", "inf", "-inf", "1e309", "NaN", "x"]
    cases = [("/v1/flows", "page_size", v) for v in bad]
    cases += [("/v1/flows/f/result", "timeout_s", v) for v in bad]
    cases += [("/v1/flows/f/history", "page_size", v) for v in bad]
    cases += [("/v1/streams/Talker/out/f/next", "timeout_s", v) for v in bad]
    cases += [("/v1/streams/Talker/out/f", "page_size", v) for v in bad]
    for token in ("99999999999999999999999", "1" * 19, "-1", "٣"):
        cases += [("/v1/flows/f/history", "page_token", token)]
        cases += [("/v1/streams/Talker/out/f/next", "resume_token", token)]
        cases += [("/v1/streams/Talker/out/f", "before", token)]
        cases += [("/v1/flows", "page_token", token)]
    for path, name, value in cases:
        r = await http.get(path, params={name: value})
        assert r.status_code == 400, (path, name, value, r.text)
        assert r.json()["code"] == "BAD_REQUEST"
    r = await http.get("/v1/flows?page_size=5&page_size=")
    assert r.status_code == 400 and "page_size is given more than once" in r.json()["message"]
    r = await http.get("/v1/flows", params={"page_token": "9" * 5000})
    assert r.status_code == 413 and "max_query_value_bytes=1024" in r.json()["message"]
    for depth in (1000, 100_000):
        deep = "[" * depth + "]" * depth
        body = _start("deep").replace(b'"spec"', b'"input":' + deep.encode() + b',"spec"')
        r = await http.post("/v1/flows", content=body)
        assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST"
        assert r.json()["message"] == "JSON body is nested too deeply"
        r = await http.post("/v1/flows/f/rpc", content=f'{{"rpc_name":"x","input":{deep}}}')
        assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST"
    assert (await http.get("/v1/flows/deep")).status_code == 404


async def test_client_strings_have_limits(http: httpx.AsyncClient) -> None:
    r = await http.post("/v1/flows", content=_start("r", request_id="q" * (8 << 20)))
    assert r.status_code == 413
    assert r.json()["message"] == (
        f"request_id is {8 << 20} bytes, over the limit max_request_id_bytes=1024"
    )
    assert (await http.post("/v1/flows", content=_start("r", request_id="q" * 1024))).is_success
    stop = encoder.encode(StopFlowRequest(reason="z" * (8 << 20)))
    r = await http.post("/v1/flows/r/stop", content=stop)
    assert r.status_code == 413
    assert r.json()["message"] == (
        f"reason is {8 << 20} bytes, over the limit max_string_bytes=65536"
    )
    flow = (await http.get("/v1/flows/r")).json()
    assert flow["status"] == "running"
    attr = InitialAttribute(name="n" * 70_000, value=raw(1))
    r = await http.post("/v1/flows", content=_start("big", initial_attributes=[attr]))
    assert r.status_code == 413 and "initial_attributes[0].name is 70000 bytes" in r.text
    r = await http.get(f"/v1/streams/{'T' * 1025}/out/f")
    assert r.status_code == 413 and "max_segment_bytes=1024" in r.json()["message"]


def _nul_requests() -> list[tuple[str, str, bytes]]:
    # (method, path, body): a NUL in every kind of client string that reaches the store
    ok_stop = encoder.encode(StopFlowRequest(reason="fine"))
    return [
        ("POST", "/v1/flows", _start("a\x00b")),
        ("POST", "/v1/flows", _start("n1", request_id="r\x00")),
        (
            "POST",
            "/v1/flows",
            _start("n2", initial_attributes=[InitialAttribute(name="a\x00", value=raw(1))]),
        ),
        ("POST", "/v1/flows", _start("n3", spec=_spec("o\x00ut"))),
        ("POST", "/v1/flows/live/stop", encoder.encode(StopFlowRequest(reason="r\x00"))),
        ("POST", "/v1/flows/a%00b/stop", ok_stop),
        ("GET", "/v1/flows/a%00b", b""),
        ("GET", "/v1/flows/live/history?run_id=%00", b""),
        ("POST", "/v1/flows/live/attributes", b'{"names":["a\\u0000"]}'),
        ("POST", "/v1/flows/live/rpc", b'{"rpc_name":"r\\u0000"}'),
        ("POST", "/v1/streams/Talker/out/live", b'{"source":"s\\u0000","value":1}'),
        ("POST", "/v1/streams/Talker/o%00ut/live", b'{"source":"s","value":1}'),
        ("GET", "/v1/flows?flow_type=%00", b""),
    ]


async def _refuses_nul(srv: RunningServer) -> None:
    async with httpx.AsyncClient(base_url=srv.url) as http:
        assert (await http.post("/v1/flows", content=_start("live"))).status_code == 200
        for method, path, body in _nul_requests():
            r = await http.request(method, path, content=body)
            assert r.status_code == 400, (method, path, r.text)
            assert r.json()["code"] == "BAD_REQUEST" and "NUL" in r.json()["message"]
        flows = (await http.get("/v1/flows")).json()["flows"]
        assert [f["flow_id"] for f in flows] == ["live"] and flows[0]["status"] == "running"
        # a NUL inside a value is JSON like any other and is kept
        body = _start("v", input=raw("a\x00b"))
        assert (await http.post("/v1/flows", content=body)).status_code == 200


async def test_nul_bytes_are_refused_on_sqlite(tmp_path: Path) -> None:
    async with running_server(tmp_path, database_url=None) as srv:
        if srv.database_url is not None:
            pytest.skip("the suite runs on PostgreSQL; the other test covers it")
        await _refuses_nul(srv)


@needs_postgres
async def test_nul_bytes_are_refused_on_postgres(tmp_path: Path, db_url: str) -> None:
    async with running_server(tmp_path, database_url=db_url) as srv:
        await _refuses_nul(srv)
