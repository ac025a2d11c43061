"""The Worker WebSocket's direct message path (``dex_server._ws.DirectWebSocketProtocol``).

The protocol is driven byte by byte with a client built on ``websockets``' sans-I/O client
(handshake, masked frames, fragments, the close handshake); then a real Worker runs a Flow
through an embedded server's WebSocket, whose connection must be on the direct path.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import dex
import pytest
from dex._wsframes import text_frame
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


async def test_frames_split_anywhere_and_mixed_with_control_frames_arrive_whole() -> None:
    link = _Link()
    await link.open()
    got: list[bytes] = []
    link.protocol.attach(got.append)
    parsed = bytearray()  # what reaches websockets' own parser
    conn = link.protocol.conn
    feed = conn.receive_data

    def receive_data(data: bytes | bytearray) -> None:
        parsed.extend(data)
        feed(data)

    conn.receive_data = receive_data  # type: ignore[method-assign]

    def wire(send: Any, *args: Any) -> bytes:
        send(*args)
        return b"".join(link.client.data_to_send())

    small, medium, large = b'{"s":1}', b"m" * 300, b"L" * 70_000  # 7-bit, 16-bit, 64-bit lengths
    ping = wire(link.client.send_ping, b"p1")
    frames = [
        (wire(link.client.send_text, small), [small]),
        (ping, []),
        (wire(link.client.send_binary, medium), [medium]),
        (wire(link.client.send_text, large), [large]),
        (wire(link.client.send_text, b""), [b""]),
    ]
    expected: list[bytes] = []
    for data, message in frames:  # byte by byte (the large one in chunks)
        step = 1 if len(data) < 1000 else 4093
        for i in range(0, len(data), step):
            assert got == expected, "a message is handed on when its last byte arrives"
            link.protocol.data_received(data[i : i + step])
        expected += message
        assert got == expected
    assert [(f.opcode, f.data) for f in link.to_client()] == [(Opcode.PONG, b"p1")]
    assert bytes(parsed) == ping, "only the control frame went through websockets' parser"

    # all at once, in one buffer
    parsed.clear()
    link.protocol.data_received(b"".join(data for data, _ in frames))
    assert got == expected * 2
    assert bytes(parsed) == ping

    # a fragmented message goes through websockets' parser, the next one directly again
    link.client.send_text(b'{"f":', fin=False)
    link.client.send_ping(b"p2")
    link.client.send_continuation(b"2}", fin=True)
    link.to_server()
    parsed.clear()
    link.client.send_text(b'{"after":1}')
    link.to_server()
    assert got[8:] == [b'{"f":2}', b'{"after":1}']
    assert [(f.opcode, f.data) for f in link.to_client()] == [
        (Opcode.PONG, b"p1"),
        (Opcode.PONG, b"p2"),
    ]
    assert parsed == b""


async def test_a_fragment_split_after_its_header_does_not_leave_websockets_inside_it() -> None:
    link = _Link()
    await link.open()
    got: list[bytes] = []
    link.protocol.attach(got.append)
    # a binary fragment (mask of zeros) whose payload starts like a text frame's header
    first = b"\x02\x82" + bytes(4) + b"\x81\x80"
    last = b"\x80\x80" + bytes(4)  # the empty final continuation
    after = text_frame(b'{"after":1}', masked=True)
    link.protocol.data_received(first[:6])  # its header and mask, not its payload
    assert got == []
    link.protocol.data_received(first[6:] + last + after)
    assert got == [b"\x81\x80", b'{"after":1}']
    assert not link.transport.closing


async def test_random_frames_in_random_chunks_arrive_as_sent() -> None:
    rng = random.Random(20261206)
    for _ in range(60):
        link = _Link()
        await link.open()
        got: list[bytes] = []
        link.protocol.attach(got.append)
        sent: list[bytes] = []
        pings: list[bytes] = []
        for _ in range(rng.randint(1, 12)):
            kind = rng.choice(["text", "binary", "fragments", "ping"])
            body = rng.randbytes(rng.choice([0, 1, 125, 126, 127, 300, 65_535, 65_536, 70_001]))
            if kind == "text":
                link.client.send_text(body)
            elif kind == "binary":
                link.client.send_binary(body)
            elif kind == "ping":
                link.client.send_ping(body[:125])
                pings.append(body[:125])
                continue
            else:
                cut = rng.randint(0, len(body))
                link.client.send_text(body[:cut], fin=False)
                link.client.send_continuation(body[cut:], fin=True)
            sent.append(body)
        wire = b"".join(link.client.data_to_send())
        at = 0
        while at < len(wire):
            size = rng.choice([1, 2, 3, 7, 100, 4096, 65_536])
            link.protocol.data_received(wire[at : at + size])
            at += size
        assert got == sent
        pongs = [f.data for f in link.to_client() if f.opcode is Opcode.PONG]
        assert pongs == pings


@pytest.mark.parametrize(
    ("wire", "code"),
    [
        (b"\x81\x02{}", 1002),  # unmasked: a client must mask
        (b"\xc1\x82abcd" + bytes(2), 1002),  # RSV1 without a negotiated extension
        (b"\x83\x80abcd", 1002),  # a reserved opcode
        (b"\x81\xff" + (2**40).to_bytes(8, "big") + b"abcd", 1009),  # over the size limit
    ],
)
async def test_a_bad_frame_after_attach_closes_as_websockets_would(wire: bytes, code: int) -> None:
    link = _Link()
    await link.open()
    got: list[bytes] = []
    link.protocol.attach(got.append)
    link.protocol.data_received(wire + b"\x81\x82abcd" + bytes(2))  # and a good frame after it
    frames = link.to_client()
    assert [f.opcode for f in frames] == [Opcode.CLOSE]
    assert frames[0].data[:2] == code.to_bytes(2, "big")
    assert got == [], "nothing after a bad frame reaches the endpoint"
    await asyncio.wait_for(link.asgi_done.wait(), 5)


async def test_a_close_frame_ends_the_direct_path_and_what_follows_is_discarded() -> None:
    link = _Link()
    await link.open()
    got: list[bytes] = []
    link.protocol.attach(got.append)
    link.client.send_text(b"1")
    link.client.send_close(1000, "bye")
    wire = b"".join(link.client.data_to_send())
    link.protocol.data_received(wire + b"\x81\x81abcd" + bytes([ord("2") ^ ord("a")]))
    assert got == [b"1"]
    frames = link.to_client()
    assert [f.opcode for f in frames] == [Opcode.CLOSE]
    assert frames[0].data == (1000).to_bytes(2, "big") + b"bye"
    await asyncio.wait_for(link.asgi_done.wait(), 5)
    assert not link.protocol.write_text(b"{}")


async def test_messages_sent_directly_carry_every_length_encoding() -> None:
    link = _Link()
    await link.open()
    link.protocol.attach(lambda data: None)
    sizes = [0, 125, 126, 65_535, 65_536, 200_000]
    for size in sizes:
        assert link.protocol.write_text(b"x" * size)
    frames = link.to_client()
    assert [(f.opcode, len(f.data), f.fin) for f in frames] == [
        (Opcode.TEXT, size, True) for size in sizes
    ]


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
