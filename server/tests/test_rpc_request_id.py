"""RPC invocations with a ``request_id``: the first that succeeds is recorded with its
effects; a retry (after a lost answer, a server crash, or at the same time) returns that
output and applies nothing again."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import msgspec
from dex._protocol import (
    ApiError,
    FlowSpec,
    InvokeRpcRequest,
    Publish,
    RpcSpec,
    StartFlowRequest,
    StateDecl,
    StepSpec,
    Task,
    TaskResult,
    encoder,
)
from dex_server.testing import RunningServer, TcpProxy, running_server

from tests._rawworker import RawWorker, raw

SPEC = FlowSpec(
    flow_type="Once",
    start_step="Idle",
    steps=[StepSpec(step_type="Idle")],
    rpcs=[
        RpcSpec(name="send", has_input=True),  # plain, publishes to inbox
        RpcSpec(name="ask"),  # no effects
    ],
    state=[StateDecl(name="inbox", kind="channel")],
)


class Handler:
    """Counts the RPC calls it serves; ``send`` publishes, ``ask`` only answers."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = asyncio.Event()
        self.go: asyncio.Event | None = None

    async def __call__(self, w: RawWorker, t: Task) -> TaskResult | None:
        if t.kind != "rpc":
            return None  # the start Step stays running
        self.calls += 1
        n = self.calls
        self.entered.set()
        if self.go is not None:
            await self.go.wait()
        if t.rpc_name == "ask":
            return TaskResult(task_id=t.task_id, rpc_output=raw(n))
        return TaskResult(
            task_id=t.task_id,
            publishes=[Publish(channel="inbox", value=t.input or raw(None))],
            rpc_output=raw(n),
        )


async def start(http: httpx.AsyncClient, flow_id: str) -> None:
    body = StartFlowRequest(flow_type="Once", flow_id=flow_id, spec=SPEC)
    response = await http.post("/v1/flows", content=encoder.encode(body))
    assert response.status_code == 200, response.text


async def call(
    http: httpx.AsyncClient, flow_id: str, rpc: str, request_id: str = ""
) -> httpx.Response:
    req = InvokeRpcRequest(
        rpc_name=rpc, input=raw("m") if rpc == "send" else None, request_id=request_id
    )
    return await http.post(f"/v1/flows/{flow_id}/rpc", content=encoder.encode(req))


async def output(http: httpx.AsyncClient, flow_id: str, rpc: str, request_id: str = "") -> object:
    response = await call(http, flow_id, rpc, request_id)
    assert response.status_code == 200, response.text
    return response.json().get("output")


async def inbox(http: httpx.AsyncClient, flow_id: str) -> int:
    state = (await http.get(f"/v1/flows/{flow_id}/state")).json()
    sizes: dict[str, int] = state.get("channel_sizes", {})
    return sizes.get("inbox", 0)


async def test_a_retry_with_the_same_request_id_returns_the_first_output(
    tmp_path: Path,
) -> None:
    h = Handler()
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], h),
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        await start(http, "f")
        assert await output(http, "f", "send", "r1") == 1
        assert await output(http, "f", "send", "r1") == 1
        assert (h.calls, await inbox(http, "f")) == (1, 1)  # neither ran nor applied again
        assert await output(http, "f", "send", "r2") == 2
        assert await output(http, "f", "send") == 3  # without a request_id: runs every time
        assert await output(http, "f", "send") == 4
        assert (h.calls, await inbox(http, "f")) == (4, 4)
        # an RPC without effects is recorded too
        assert await output(http, "f", "ask", "q") == 5
        assert await output(http, "f", "ask", "q") == 5
        assert h.calls == 5
        # ids are kept per run: another Flow's "r1" is its own
        await start(http, "g")
        assert await output(http, "g", "send", "r1") == 6
        assert await inbox(http, "g") == 1

        response = await call(http, "f", "send", "x" * 257)
        assert response.status_code == 400
        assert msgspec.json.decode(response.content, type=ApiError).code == "BAD_REQUEST"


async def test_concurrent_invocations_of_one_request_id_apply_once(tmp_path: Path) -> None:
    h = Handler()
    h.go = asyncio.Event()
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], h, slots=8, reserved=1),
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        await start(http, "f")
        calls = [asyncio.create_task(output(http, "f", "send", "same")) for _ in range(5)]
        await asyncio.wait_for(h.entered.wait(), 20)
        h.go.set()
        outputs = await asyncio.gather(*calls)
        assert len(set(outputs)) == 1, outputs
        assert await inbox(http, "f") == 1


async def test_an_answer_lost_after_the_commit_is_recovered_by_the_retry(tmp_path: Path) -> None:
    """The client's connection drops while the RPC runs; the server commits anyway. The retry
    with the same request_id gets the committed output; a restarted server still knows it."""
    h = Handler()
    h.go = asyncio.Event()
    srv = RunningServer(tmp_path / "server", {})
    (tmp_path / "server").mkdir()
    await srv.start()
    try:
        host, port = srv.address.rsplit(":", 1)
        proxy = TcpProxy((host, int(port)))
        try:
            async with (
                RawWorker(srv.address, [SPEC], h),
                httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
                httpx.AsyncClient(base_url=f"http://127.0.0.1:{proxy.port}", timeout=30) as cut,
            ):
                await start(http, "f")
                first = asyncio.create_task(call(cut, "f", "send", "lost"))
                await asyncio.wait_for(h.entered.wait(), 20)
                proxy.cut()  # the answer cannot reach this client any more
                h.go.set()
                try:
                    await first
                except httpx.TransportError:
                    pass
                else:
                    raise AssertionError("the first call should have lost its connection")
                deadline = asyncio.get_running_loop().time() + 20
                while await inbox(http, "f") == 0:  # the server committed it all the same
                    assert asyncio.get_running_loop().time() < deadline, "never committed"
                    await asyncio.sleep(0.02)
                proxy.restore()
                assert await output(cut, "f", "send", "lost") == 1
                assert (h.calls, await inbox(http, "f")) == (1, 1)
        finally:
            proxy.close()
        srv.kill()  # a crash: the record is durable
        await srv.start()
        h2 = Handler()
        async with (
            RawWorker(srv.address, [SPEC], h2),
            httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
        ):
            assert await output(http, "f", "send", "lost") == 1
            assert h2.calls == 0
            assert await inbox(http, "f") == 1
    finally:
        await srv.stop()
