"""Specs and state names the server checks: a Worker's registration is held to the same spec
rules as an HTTP start, and starts, Step results and RPCs may write only the state their
Flow type's persistence schema declares. A refusal is a typed error and commits nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import msgspec
import websockets
from dex._protocol import (
    PROTOCOL_VERSION,
    ApiError,
    ChannelDelete,
    DecisionSpec,
    FlowSpec,
    InitialAttribute,
    InvokeRpcRequest,
    Publish,
    Register,
    RegisterRejected,
    RpcSpec,
    StartFlowRequest,
    StateDecl,
    StepSpec,
    Task,
    TaskResult,
    encoder,
    server_frame_decoder,
)
from dex_server.testing import running_server

from tests._rawworker import RawWorker, raw

SPEC = FlowSpec(
    flow_type="Schema",
    start_step="A",
    steps=[StepSpec(step_type="A")],  # the default retry policy
    rpcs=[RpcSpec(name="write", has_input=True)],
    state=[
        StateDecl(name="count", kind="attribute"),
        StateDecl(name="notes", kind="attribute_map"),
        StateDecl(name="inbox", kind="channel"),
    ],
)


def body(flow_id: str, **kw: object) -> bytes:
    req = StartFlowRequest(flow_type="Schema", flow_id=flow_id, spec=SPEC, **kw)  # type: ignore[arg-type]
    return encoder.encode(req)


def api_error(response: httpx.Response) -> ApiError:
    return msgspec.json.decode(response.content, type=ApiError)


async def register(address: str, spec: FlowSpec) -> object:
    async with websockets.connect(f"ws://{address}/v1/worker") as ws:
        frame = Register(
            app_worker_id="raw",
            flows=[spec],
            max_concurrent_tasks=2,
            reserved_rpc_tasks=1,
            protocol_version=PROTOCOL_VERSION,
        )
        await ws.send(encoder.encode(frame).decode())
        return server_frame_decoder.decode(await ws.recv())


async def test_a_worker_spec_with_a_missing_start_step_is_refused_like_a_start(
    tmp_path: Path,
) -> None:
    bad = FlowSpec(flow_type="Broken", start_step="Nowhere", steps=[StepSpec(step_type="A")])
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        start = StartFlowRequest(flow_type="Broken", flow_id="b1", spec=bad)
        response = await http.post("/v1/flows", content=encoder.encode(start))
        assert response.status_code == 400
        assert "Nowhere" in api_error(response).message

        answer = await register(srv.address, bad)
        assert isinstance(answer, RegisterRejected), answer
        assert answer.code == "BAD_REQUEST"
        assert "Nowhere" in answer.message
        # nothing was stored: a start without a spec does not know the type
        bare = StartFlowRequest(flow_type="Broken", flow_id="b2", spec=FlowSpec(flow_type="Broken"))
        response = await http.post("/v1/flows", content=encoder.encode(bare))
        assert api_error(response).code == "UNKNOWN_FLOW_TYPE", response.text

        # a spec repeating a Step type is refused both ways too
        twice = FlowSpec(flow_type="Twice", steps=[StepSpec(step_type="A")] * 2)
        start = StartFlowRequest(flow_type="Twice", flow_id="t1", spec=twice)
        assert (await http.post("/v1/flows", content=encoder.encode(start))).status_code == 400
        answer = await register(srv.address, twice)
        assert isinstance(answer, RegisterRejected) and answer.code == "BAD_REQUEST", answer


async def test_initial_attributes_must_be_declared(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        for name in ["", "undeclared", "inbox", "notes", "notes/", "count/x"]:
            flow_id = f"init-{name.replace('/', '_') or 'empty'}"
            attrs = [
                InitialAttribute(name="count", value=raw(1)),
                InitialAttribute(name=name, value=raw(2)),
            ]
            response = await http.post("/v1/flows", content=body(flow_id, initial_attributes=attrs))
            assert response.status_code == 400, (name, response.text)
            assert api_error(response).code == "BAD_REQUEST"
            # nothing committed: no run, so no Attribute either
            assert (await http.get(f"/v1/flows/{flow_id}")).status_code == 404
        attrs = [
            InitialAttribute(name="count", value=raw(1)),
            InitialAttribute(name="notes/a%2Fb", value=raw(2)),
        ]
        response = await http.post("/v1/flows", content=body("init-ok", initial_attributes=attrs))
        assert response.status_code == 200, response.text
        state = (await http.get("/v1/flows/init-ok/state")).json()
        assert sorted(state["attribute_names"]) == ["count", "notes/a%2Fb"]


async def wait_tasks(w: RawWorker, n: int) -> None:
    deadline = time.monotonic() + 20
    while len(w.tasks) < n:
        assert time.monotonic() < deadline, f"{len(w.tasks)} tasks arrived, not {n}"
        await asyncio.sleep(0.02)


async def test_step_results_writing_undeclared_state_fail_and_commit_nothing(
    tmp_path: Path,
) -> None:
    bad_results = {
        "attr": TaskResult(task_id="", attribute_writes={"count": raw(5), "stray": raw(1)}),
        "empty": TaskResult(task_id="", attribute_writes={"": raw(1)}),
        "mapless": TaskResult(task_id="", attribute_writes={"other/k": raw(1)}),
        "channel": TaskResult(
            task_id="",
            attribute_writes={"count": raw(5)},
            publishes=[Publish(channel="outbox", value=raw(1))],
        ),
        "delete": TaskResult(
            task_id="", channel_deletes=[ChannelDelete(channel="nowhere", message_id="m")]
        ),
    }

    async def handler(w: RawWorker, t: Task) -> TaskResult:
        flow_id = t.flow_id
        result = msgspec.structs.replace(
            bad_results[flow_id], task_id=t.task_id, decision=DecisionSpec(kind="dead_end")
        )
        return result

    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], handler) as w,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        for flow_id in bad_results:
            assert (await http.post("/v1/flows", content=body(flow_id))).status_code == 200
        for flow_id in bad_results:
            res = (await http.get(f"/v1/flows/{flow_id}/result?timeout_s=20")).json()
            assert res["status"] == "failed", (flow_id, res)
            assert res["error_type"] == "INVALID_USER_FLOW_CODE", (flow_id, res)
            assert "persistence schema" in res["error_message"], (flow_id, res)
            state = (await http.get(f"/v1/flows/{flow_id}/state")).json()
            assert state.get("attribute_names", []) == [], (flow_id, state)
            assert not state.get("channel_sizes"), (flow_id, state)
        assert len(w.tasks) == len(bad_results)  # each failed at once, no retry


async def test_an_rpc_writing_undeclared_state_is_refused_and_commits_nothing(
    tmp_path: Path,
) -> None:
    async def handler(w: RawWorker, t: Task) -> TaskResult | None:
        if t.kind != "rpc":
            return None  # the start Step stays running
        name = msgspec.json.decode(t.input or b'""')
        return TaskResult(task_id=t.task_id, attribute_writes={name: raw(1)}, rpc_output=raw(1))

    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], handler),
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        assert (await http.post("/v1/flows", content=body("rpc"))).status_code == 200
        call = InvokeRpcRequest(rpc_name="write", input=raw("stray"))
        response = await http.post("/v1/flows/rpc/rpc", content=encoder.encode(call))
        assert response.status_code == 400, response.text
        assert "stray" in api_error(response).message
        state = (await http.get("/v1/flows/rpc/state")).json()
        assert state.get("attribute_names", []) == []
        call = InvokeRpcRequest(rpc_name="write", input=raw("count"))
        response = await http.post("/v1/flows/rpc/rpc", content=encoder.encode(call))
        assert response.status_code == 200, response.text
        state = (await http.get("/v1/flows/rpc/state")).json()
        assert state["attribute_names"] == ["count"]
