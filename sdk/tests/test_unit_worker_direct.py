"""The Worker's direct message path (``dex._worker._session.DirectConnection``).

A plain ``websockets`` server in this process talks to a ``DirectConnection``: messages
buffered before the switch stay for ``recv()``, later ones (fragmented too) reach the sink
from the read callback, and a sink that raises ends the connection and is kept. Then a
real Worker serves a Flow over an embedded server's WebSocket on that path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import dex
import pytest
from dex._worker._session import DirectConnection
from dex_server.app import ServerConfig
from dex_server.embedded import EmbeddedServer
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve


async def test_buffered_messages_then_the_sink_then_a_failing_sink() -> None:
    go = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        await ws.send("first")
        await ws.send("second")
        assert await ws.recv() == "go"
        await ws.send(['{"x":', "1", "}"])  # one message in three frames
        await ws.send(b"\x00\x01")
        assert await ws.recv() == "more"
        await ws.send("boom")
        await ws.wait_closed()

    async with serve(handler, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        got: list[bytes] = []
        async with connect(f"ws://127.0.0.1:{port}", create_connection=DirectConnection) as ws:
            assert isinstance(ws, DirectConnection)
            assert await ws.recv() == "first"
            ws.sink = got.append
            # "second" arrived before the switch: recv() still has it, the sink does not
            assert await ws.recv() == "second"
            await ws.send("go")
            async with asyncio.timeout(10):
                while len(got) < 2:
                    await asyncio.sleep(0.01)
            assert got == [b'{"x":1}', b"\x00\x01"]

            def broken(data: bytes) -> None:
                go.set()
                raise ValueError(f"cannot read {data!r}")

            ws.sink = broken
            await ws.send("more")
            async with asyncio.timeout(10):
                await ws.wait_closed()
            assert go.is_set()
            assert isinstance(ws.sink_error, ValueError)
            assert ws.sink is None


class Hop(dex.Step[int]):
    async def execute(self, context: dex.Context, left: int) -> dex.StepDecision:
        if left <= 1:
            return dex.StepDecision.graceful_complete(left)
        return dex.StepDecision.go_to(Hop, left - 1)


class Hops(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Hop())


@pytest.mark.timeout(60)
async def test_a_worker_on_a_websocket_serves_on_the_direct_path(tmp_path: Path) -> None:
    flow = Hops()
    registry = dex.Registry([flow], allow_async_handlers=True)
    config = ServerConfig(database_path=tmp_path / "db.sqlite3", port=0)
    async with EmbeddedServer(config=config, name="worker-direct") as server:
        # the HTTP address, not inproc://: a WebSocket to uvicorn
        worker = dex.AsyncWorker(registry, None, dex.WorkerOptions(server_address=server.address))
        serving = asyncio.create_task(worker.start())
        client = dex.AsyncClient(registry, None, dex.ClientOptions(server_address=server.address))
        try:
            await worker.wait_pull_registered(30)
            await client.start_flow(flow, "hops", 30)
            result = await client.wait_for_flow("hops", timeout=30)
            assert result.status is dex.FlowStatus.COMPLETED
            direct = worker._session._direct
            assert isinstance(direct, DirectConnection) and direct.sink is not None
        finally:
            await client.close()
            await worker.stop()
            await serving
