"""The Worker WebSocket's direct message path (``dex_server._ws.DirectWebSocketProtocol``).

The protocol is driven byte by byte with a client built on ``websockets``' sans-I/O client
(handshake, masked frames, fragments, the close handshake); then a real Worker runs a Flow
through an embedded server's WebSocket, whose connection must be on the direct path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import dex
import pytest
from dex_server._ws import DIRECT_FRAMES, DirectWebSocketProtocol
from dex_server.app import ServerConfig
from dex_server.embedded import EmbeddedServer
from uvicorn.config import Config
from uvicorn.server import ServerState
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Response
from websockets.uri import parse_uri


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.closing = False
        self.reading = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 50000), "sockname": ("127.0.0.1", 8801)}.get(
            name, default
        )

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def take(self) -> bytes:
        data = bytes(self.written)
        self.written.clear()
        return data


class _Link:
    """A protocol on a fake transport, an ASGI app that accepts, and a sans-I/O client."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []
        self.asgi_done = asyncio.Event()

        async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
            self.scopes.append(scope)
            assert (await receive())["type"] == "websocket.connect"
            await send({"type": "websocket.accept"})
            while True:
                event = await receive()
                self.received.append(event)
                if event["type"] == "websocket.disconnect":
                    self.asgi_done.set()
                    return

        config = Config(app=app, ws=DirectWebSocketProtocol, log_level="warning")
        config.load()
        self.protocol = DirectWebSocketProtocol(config, ServerState(), {})
        self.transport = _Transport()
        self.protocol.connection_made(self.transport)
        self.client = ClientProtocol(parse_uri("ws://127.0.0.1:8801/v1/worker"))

    def to_server(self) -> None:
        self.protocol.data_received(b"".join(self.client.data_to_send()))

    def to_client(self) -> list[Any]:
        self.client.receive_data(self.transport.take())
        return list(self.client.events_received())

    async def open(self) -> None:
        self.client.send_request(self.client.connect())
        self.to_server()
        for _ in range(100):  # the ASGI task accepts on the loop
            await asyncio.sleep(0)
            if self.transport.written:
                break
        events = self.to_client()
        assert isinstance(events[0], Response) and events[0].status_code == 101


async def test_the_scope_offers_the_direct_path_and_messages_bypass_asgi() -> None:
    link = _Link()
    await link.open()
    assert link.scopes[0]["extensions"][DIRECT_FRAMES] is link.protocol

    # before attach: the ordinary ASGI path
    link.client.send_text(b'{"type":"first"}')
    link.to_server()
    await asyncio.sleep(0)
    assert link.received == [{"type": "websocket.receive", "text": '{"type":"first"}'}]

    got: list[bytes] = []
    link.protocol.attach(got.append)
    link.client.send_text('{"a":"é"}'.encode())
    link.client.send_binary(b"\x00\x01")
    # a message in three fragments arrives whole
    link.client.send_text(b'{"b":', fin=False)
    link.client.send_continuation(b'"xy', fin=False)
    link.client.send_continuation(b'z"}', fin=True)
    link.to_server()
    assert got == ['{"a":"é"}'.encode(), b"\x00\x01", b'{"b":"xyz"}']
    await asyncio.sleep(0)
    assert len(link.received) == 1, "no message went through ASGI after attach"
    assert link.transport.reading, "the direct path never pauses reading"

    assert link.protocol.write_text(b'{"type":"task"}')
    frames = link.to_client()
    assert len(frames) == 1 and isinstance(frames[0], Frame)
    assert frames[0].opcode is Opcode.TEXT and frames[0].data == b'{"type":"task"}'

    # pings are still answered by the protocol
    link.client.send_ping(b"p1")
    link.to_server()
    pongs = link.to_client()
    assert [(f.opcode, f.data) for f in pongs] == [(Opcode.PONG, b"p1")]


async def test_a_sink_error_and_close_now_end_the_connection_with_a_close_frame() -> None:
    link = _Link()
    await link.open()

    def broken(data: bytes) -> None:
        raise RuntimeError("boom")

    link.protocol.attach(broken)
    link.client.send_text(b"{}")
    link.to_server()
    frames = link.to_client()
    assert [f.opcode for f in frames] == [Opcode.CLOSE]
    assert frames[0].data[:2] == (1011).to_bytes(2, "big")
    await asyncio.wait_for(link.asgi_done.wait(), 5)
    assert link.received[-1] == {
        "type": "websocket.disconnect",
        "code": 1011,
        "reason": "internal error",
    }
    assert not link.protocol.write_text(b"{}"), "nothing is sent after the close"
    link.protocol.close_now(1008, "again")  # a second close is a no-op
    assert link.to_client() == []


async def test_close_now_sends_the_code_and_the_reason() -> None:
    link = _Link()
    await link.open()
    link.protocol.attach(lambda data: None)
    link.protocol.close_now(1008, "too many unreadable frames")
    frames = link.to_client()
    assert frames[0].opcode is Opcode.CLOSE
    assert frames[0].data == (1008).to_bytes(2, "big") + b"too many unreadable frames"
    # the client answered the close frame (sans-I/O does it on receipt): the handshake ends
    link.to_server()
    assert link.transport.closing


class Hop(dex.Step[int]):
    async def execute(self, context: dex.Context, left: int) -> dex.StepDecision:
        if left <= 1:
            return dex.StepDecision.graceful_complete(left)
        return dex.StepDecision.go_to(Hop, left - 1)


class Hops(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Hop())


@pytest.mark.timeout(60)
async def test_a_worker_over_the_websocket_is_served_on_the_direct_path(tmp_path: Path) -> None:
    flow = Hops()
    registry = dex.Registry([flow], allow_async_handlers=True)
    config = ServerConfig(database_path=tmp_path / "db.sqlite3", port=0)
    async with EmbeddedServer(config=config, name="ws-direct") as server:
        # the HTTP address, not inproc://: the Worker talks WebSocket to uvicorn
        options = dex.WorkerOptions(server_address=server.address)
        worker = dex.AsyncWorker(registry, None, options)
        serving = asyncio.create_task(worker.start())
        client = dex.AsyncClient(registry, None, dex.ClientOptions(server_address=server.address))
        try:
            await worker.wait_pull_registered(30)
            await client.start_flow(flow, "hops", 20)
            result = await client.wait_for_flow("hops", timeout=30)
            assert result.status is dex.FlowStatus.COMPLETED
            assert server._server is not None
            links = [
                conn
                for conn in server._server.server_state.connections
                if isinstance(conn, DirectWebSocketProtocol)
            ]
            assert len(links) == 1 and links[0]._sink is not None
        finally:
            await client.close()
            await worker.stop()
            await serving
