from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import msgspec
from dex._protocol import (
    ConditionSpec,
    DecisionSpec,
    FlowSpec,
    Heartbeat,
    HeartbeatAck,
    InvokeRpcRequest,
    Movement,
    Publish,
    RetryPolicySpec,
    RpcSpec,
    StartFlowRequest,
    StateDecl,
    StepOptionsSpec,
    StepSpec,
    StreamWriteRequest,
    Task,
    TaskResult,
    WaitSpec,
    encoder,
)
from dex_server.testing import running_server

from tests._rawworker import RawWorker, raw

SPEC = FlowSpec(
    flow_type="Counter",
    start_step="A",
    steps=[StepSpec(step_type="A"), StepSpec(step_type="B", has_wait_for=True)],
    rpcs=[RpcSpec(name="send", is_transactional=True, has_input=True)],
    state=[StateDecl(name="count", kind="attribute"), StateDecl(name="inbox", kind="channel")],
)


async def counter(w: RawWorker, t: Task) -> TaskResult | None:
    tid = t.task_id
    if t.kind == "execute" and t.step_type == "A":
        n = msgspec.json.decode(t.input) if t.input else 0
        if n < 3:
            return TaskResult(
                task_id=tid,
                attribute_writes={"count": raw(n)},
                decision=DecisionSpec(
                    kind="go_to", movements=[Movement(step_type="A", input=raw(n + 1))]
                ),
            )
        return TaskResult(
            task_id=tid, decision=DecisionSpec(kind="go_to", movements=[Movement(step_type="B")])
        )
    if t.kind == "wait_for":
        return TaskResult(
            task_id=tid, wait=WaitSpec(conditions=[ConditionSpec(kind="channel", channel="inbox")])
        )
    if t.kind == "execute":
        assert t.condition_results is not None
        return TaskResult(
            task_id=tid,
            decision=DecisionSpec(
                kind="graceful_complete", output=t.condition_results.channel_values[0][0]
            ),
        )
    return TaskResult(
        task_id=tid,
        publishes=[Publish(channel="inbox", value=t.input or raw(0))],
        rpc_output=raw(True),
    )


def start_body(flow_id: str, spec: FlowSpec = SPEC) -> bytes:
    return encoder.encode(
        StartFlowRequest(flow_type=spec.flow_type, flow_id=flow_id, spec=spec, input=raw(0))
    )


async def wait_phase(http: httpx.AsyncClient, flow_id: str, phase: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st = (await http.get(f"/v1/flows/{flow_id}/state")).json()
        if any(a["phase"] == phase for a in st.get("active_steps", [])):
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{flow_id} never reached {phase}")


async def test_flow_runs_to_completion_through_rpc(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], counter),
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        r = await http.post("/v1/flows", content=start_body("f1"))
        assert r.status_code == 200
        await wait_phase(http, "f1", "waiting")
        r = await http.post(
            "/v1/flows/f1/rpc",
            content=encoder.encode(InvokeRpcRequest(rpc_name="send", input=raw("hi"))),
        )
        assert r.json() == {"output": True}
        res = (await http.get("/v1/flows/f1/result?timeout_s=10")).json()
        assert res["status"] == "completed" and res["completions"][0]["output"] == "hi"
        hist = (await http.get("/v1/flows/f1/history?page_size=3")).json()
        assert [e["type"] for e in hist["events"]][0] == "FlowStarted"
        nxt = (await http.get(f"/v1/flows/f1/history?page_token={hist['next_page_token']}")).json()
        types = [e["type"] for e in nxt["events"]]
        assert types[-1] == "FlowClosed" and "RpcExecutionCompleted" in types


async def test_bad_input(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, max_request_bytes=10_000, max_value_bytes=1000) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        r = await http.post("/v1/flows", content=b"{nope")
        assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST"
        assert "malformed JSON" in r.json()["message"]
        r = await http.get("/v1/flows/missing")
        assert r.status_code == 404 and r.json()["code"] == "FLOW_NOT_FOUND"
        empty = FlowSpec(flow_type="Nope")
        r = await http.post("/v1/flows", content=start_body("x", empty))
        assert r.json()["code"] == "UNKNOWN_FLOW_TYPE"
        assert (await http.post("/v1/flows", content=start_body("dup"))).status_code == 200
        r = await http.post("/v1/flows", content=start_body("dup"))
        assert r.status_code == 409 and r.json()["code"] == "FLOW_ALREADY_STARTED"
        r = await http.post("/v1/flows", content=b"x" * 20_000)
        assert r.status_code == 413 and "max_request_bytes" in r.json()["message"]
        big = encoder.encode(
            StartFlowRequest(flow_type="Counter", flow_id="big", spec=SPEC, input=raw("y" * 2000))
        )
        r = await http.post("/v1/flows", content=big)
        assert r.status_code == 413 and "max_value_bytes" in r.json()["message"]
        # the refused start left nothing behind, not even its spec: a new type stays unknown
        ghost = msgspec.structs.replace(SPEC, flow_type="Ghost")
        big = encoder.encode(
            StartFlowRequest(flow_type="Ghost", flow_id="g", spec=ghost, input=raw("y" * 2000))
        )
        assert (await http.post("/v1/flows", content=big)).status_code == 413
        r = await http.post("/v1/flows", content=start_body("g", FlowSpec(flow_type="Ghost")))
        assert r.json()["code"] == "UNKNOWN_FLOW_TYPE"


async def test_malformed_page_tokens_are_bad_requests(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        for fid in ("p1", "p2", "p3"):
            assert (await http.post("/v1/flows", content=start_body(fid))).status_code == 200
        first = (await http.get("/v1/flows", params={"page_size": 2})).json()
        assert [f["flow_id"] for f in first["flows"]] == ["p3", "p2"]
        rest = (
            await http.get(
                "/v1/flows", params={"page_size": 2, "page_token": first["next_page_token"]}
            )
        ).json()
        assert [f["flow_id"] for f in rest["flows"]] == ["p1"]
        assert rest.get("next_page_token") is None

        token = first["next_page_token"]
        for bad in ("nope", "123", token.upper(), token + "0", token[:-1], "p1"):
            r = await http.get("/v1/flows", params={"page_token": bad})
            assert r.status_code == 400, bad
            assert r.json()["code"] == "BAD_REQUEST"
            assert r.json()["message"] == f"bad page_token {bad!r}"
        for bad in ("bogus", "RUNNING", "cancelled"):
            r = await http.get("/v1/flows", params={"status": bad})
            assert r.status_code == 400, bad
            assert r.json()["message"].startswith(f"bad status {bad!r}; one of running,")
        done = (await http.get("/v1/flows", params={"status": "completed"})).json()
        assert done["flows"] == []
        r = await http.get("/v1/flows/p1/history", params={"page_token": "nope"})
        assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST"
        assert "bad page_token" in r.json()["message"]


TALKER = FlowSpec(flow_type="Talker", state=[StateDecl(name="out", kind="stream")])


async def test_flow_id_over_the_limit_is_rejected_and_stores_nothing(tmp_path: Path) -> None:
    longest = "é" * 512  # 1024 UTF-8 bytes
    too_long = longest + "x"
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        r = await http.post("/v1/flows", content=start_body(too_long))
        assert r.status_code == 413 and r.json()["code"] == "LIMIT_EXCEEDED"
        assert r.json()["message"] == "flow_id is 1025 bytes, over the limit max_flow_id_bytes=1024"
        r = await http.post("/v1/flows", content=start_body(too_long, TALKER))
        assert r.status_code == 413
        # nothing was written: no Flow, and not even the new Flow type's spec
        assert (await http.get("/v1/flows")).json()["flows"] == []
        r = await http.get(f"/v1/flows/{too_long}")
        assert r.status_code == 413 and "max_flow_id_bytes=1024" in r.json()["message"]
        r = await http.get("/v1/streams/Talker/out/x")
        assert r.json()["code"] == "UNKNOWN_FLOW_TYPE"

        assert (
            await http.post("/v1/flows", content=start_body(longest, TALKER))
        ).status_code == 200
        listed = (await http.get("/v1/flows")).json()["flows"]
        assert [f["flow_id"] for f in listed] == [longest]

        write = encoder.encode(StreamWriteRequest(value=raw("hi"), source="test"))
        r = await http.post(f"/v1/streams/Talker/out/{too_long}", content=write)
        assert r.status_code == 413 and "max_flow_id_bytes=1024" in r.json()["message"]
        assert (await http.get(f"/v1/streams/Talker/out/{too_long}")).status_code == 413
        assert (await http.get(f"/v1/streams/Talker/out/{'x' * 1024}")).json()["messages"] == []
        r = await http.post(f"/v1/streams/Talker/out/{longest}", content=write)
        assert r.status_code == 200
        assert len((await http.get(f"/v1/streams/Talker/out/{longest}")).json()["messages"]) == 1


async def test_stream_next_returns_a_batch_only_when_asked(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        assert (
            await http.post("/v1/flows", content=start_body("batch", TALKER))
        ).status_code == 200
        for word in ("a", "b", "c"):
            write = encoder.encode(StreamWriteRequest(value=raw(word), source="test"))
            assert (await http.post("/v1/streams/Talker/out/batch", content=write)).is_success
        base = "/v1/streams/Talker/out/batch/next?timeout_s=0"
        one = (await http.get(base)).json()
        assert "messages" not in one and one["message"]["value"] == "a"
        first = one["message"]["resume_token"]
        two = (await http.get(base + "&max_messages=2")).json()
        assert [m["value"] for m in two["messages"]] == ["a", "b"]
        assert two["message"] == two["messages"][0] == one["message"]
        rest = (await http.get(base + f"&max_messages=5000&resume_token={first}")).json()
        assert [m["value"] for m in rest["messages"]] == ["b", "c"]
        last = rest["messages"][-1]["resume_token"]
        assert (await http.get(base + f"&max_messages=5&resume_token={last}")).json() == {}
        for bad in ("0", "-2", "1.5", "x"):
            r = await http.get(base + f"&max_messages={bad}")
            assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST"
            assert "max_messages" in r.json()["message"]


async def test_auth(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, token="s3cret") as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        assert (await http.get("/v1/health")).status_code == 200
        r = await http.get("/v1/flows")
        assert r.status_code == 401 and r.json()["code"] == "UNAUTHENTICATED"
        r = await http.get("/v1/flows", headers={"Authorization": "Bearer s3cret"})
        assert r.status_code == 200


async def test_waiting_flow_survives_server_kill(tmp_path: Path) -> None:
    async with running_server(tmp_path) as srv:
        async with (
            RawWorker(srv.address, [SPEC], counter),
            httpx.AsyncClient(base_url=srv.url) as http,
        ):
            await http.post("/v1/flows", content=start_body("k1"))
            await wait_phase(http, "k1", "waiting")
        srv.kill()
        await srv.restart()
        async with (
            RawWorker(srv.address, [SPEC], counter),
            httpx.AsyncClient(base_url=srv.url) as http,
        ):
            r = await http.post(
                "/v1/flows/k1/rpc",
                content=encoder.encode(InvokeRpcRequest(rpc_name="send", input=raw("after"))),
            )
            assert r.status_code == 200, r.text
            res = (await http.get("/v1/flows/k1/result?timeout_s=10")).json()
            assert res["completions"][0]["output"] == "after"
            hist = (await http.get("/v1/flows/k1/history")).json()
            ids = [
                e["payload"]["context"]["stepExecutionId"]
                for e in hist["events"]
                if e["type"] == "StepExecuteCompleted"
            ]
            assert ids == ["A-1", "A-2", "A-3", "A-4", "B-1"]


ONCE = FlowSpec(
    flow_type="Once",
    start_step="S",
    steps=[
        StepSpec(
            step_type="S",
            options=StepOptionsSpec(execute_retry=RetryPolicySpec(maximum_attempts=1)),
        )
    ],
)


async def test_durable_start_is_at_most_once_across_server_kill(tmp_path: Path) -> None:
    acked = asyncio.Event()

    async def hang(w: RawWorker, t: Task) -> TaskResult | None:
        await w.send(Heartbeat(task_id=t.task_id, durable=True, seq=1))
        return None  # never finishes: the server dies first

    async with running_server(tmp_path) as srv:
        async with (
            RawWorker(srv.address, [ONCE], hang) as w,
            httpx.AsyncClient(base_url=srv.url) as http,
        ):
            await http.post("/v1/flows", content=start_body("once", ONCE))
            deadline = time.monotonic() + 10
            while not any(isinstance(f, HeartbeatAck) for f in w.frames):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            acked.set()
            srv.kill()
        await srv.restart()
        seen: list[Task] = []

        async def record(w: RawWorker, t: Task) -> TaskResult | None:
            seen.append(t)
            return None

        async with (
            RawWorker(srv.address, [ONCE], record),
            httpx.AsyncClient(base_url=srv.url) as http,
        ):
            res = (await http.get("/v1/flows/once/result?timeout_s=10")).json()
            assert res["status"] == "failed"
            assert seen == []


async def test_redelivery_without_frames_and_failure_after_output(tmp_path: Path) -> None:
    async def silent(w: RawWorker, t: Task) -> TaskResult | None:
        return None

    async def chatty(w: RawWorker, t: Task) -> TaskResult | None:
        await w.send(Heartbeat(task_id=t.task_id))
        return None

    async with running_server(tmp_path) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        w1 = await RawWorker(srv.address, [SPEC], silent).__aenter__()
        await http.post("/v1/flows", content=start_body("r1"))
        deadline = time.monotonic() + 10
        while not w1.tasks:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        await w1.close()
        async with RawWorker(srv.address, [SPEC], chatty) as w2:
            while not w2.tasks:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            assert w2.tasks[0].attempt == 1  # same attempt redelivered
            await asyncio.sleep(0.1)
        async with RawWorker(srv.address, [SPEC], silent) as w3:
            while not w3.tasks:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            assert w3.tasks[0].attempt == 2  # output was seen: the attempt failed
