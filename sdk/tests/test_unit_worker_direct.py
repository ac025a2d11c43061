"""The Worker's direct message path (``dex._worker._session.DirectConnection``).

A plain ``websockets`` server in this process talks to a ``DirectConnection``: messages
buffered before the switch stay for ``recv()``, later ones (fragmented too) reach the sink
from the read callback, and a sink that raises ends the connection and is kept. Then a
real Worker serves a Flow over an embedded server's WebSocket on that path.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import dex
import pytest
from dex._worker._session import DirectConnection
from dex._wsframes import message_limit, sansio_ready
from dex_server.app import ServerConfig
from dex_server.embedded import EmbeddedServer
from websockets.asyncio.client import connect
from websockets.asyncio.server import ServerConnection, serve
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.http11 import Request
from websockets.protocol import State
from websockets.server import ServerProtocol
from websockets.uri import parse_uri


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


class _Wire(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += data

    def is_closing(self) -> bool:
        return self.aborted

    def abort(self) -> None:
        self.aborted = True

    def close(self) -> None:
        self.aborted = True

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0

    def can_write_eof(self) -> bool:
        return False

    def take(self) -> bytes:
        data = bytes(self.written)
        self.written.clear()
        return data


async def _opened() -> tuple[DirectConnection, _Wire, ServerProtocol]:
    """A DirectConnection on a fake transport, open with a sans-I/O server at the other end."""
    conn = DirectConnection(ClientProtocol(parse_uri("ws://127.0.0.1:8801/v1/worker")))
    wire = _Wire()
    conn.connection_made(wire)
    conn.protocol.send_request(conn.protocol.connect())
    conn.send_data()
    server = ServerProtocol()
    server.receive_data(wire.take())
    request = server.events_received()[0]
    assert isinstance(request, Request)
    server.send_response(server.accept(request))
    conn.data_received(b"".join(server.data_to_send()))
    assert conn.protocol.state.name == "OPEN"
    return conn, wire, server


async def test_server_frames_split_anywhere_reach_the_sink_and_control_frames_websockets() -> None:
    conn, wire, server = await _opened()
    got: list[bytes] = []
    conn.sink = got.append
    parsed = bytearray()  # what reaches websockets' own parser
    feed = conn.protocol.receive_data

    def receive_data(data: bytes | bytearray) -> None:
        parsed.extend(data)
        feed(data)

    conn.protocol.receive_data = receive_data  # type: ignore[method-assign]

    def frame(send: Any, *args: Any) -> bytes:
        send(*args)
        return b"".join(server.data_to_send())

    small, medium, large = b'{"s":1}', b"m" * 300, b"L" * 70_000  # 7-bit, 16-bit, 64-bit lengths
    ping = frame(server.send_ping, b"p1")
    frames = [
        (frame(server.send_text, small), [small]),
        (ping, []),
        (frame(server.send_binary, medium), [medium]),
        (frame(server.send_text, large), [large]),
        (frame(server.send_text, b""), [b""]),
    ]
    expected: list[bytes] = []
    for data, message in frames:
        step = 1 if len(data) < 1000 else 4093
        for i in range(0, len(data), step):
            assert got == expected, "a message is handed on when its last byte arrives"
            conn.data_received(data[i : i + step])
        expected += message
        assert got == expected
    assert bytes(parsed) == ping, "only the ping went through websockets' parser"
    server.receive_data(wire.take())
    pongs = [(f.opcode, f.data) for f in server.events_received() if isinstance(f, Frame)]
    assert pongs == [(Opcode.PONG, b"p1")]

    parsed.clear()
    conn.data_received(b"".join(data for data, _ in frames))  # all in one read
    assert got == expected * 2
    assert bytes(parsed) == ping

    # what the Worker sends directly is a masked text frame websockets reads
    for size in (0, 125, 126, 65_535, 65_536):
        conn.send_text_now(b"x" * size)
    server.receive_data(wire.take())
    events = server.events_received()
    assert [(f.opcode, len(f.data), f.fin) for f in events if isinstance(f, Frame)] == [
        (Opcode.PONG, 2, True),
        *[(Opcode.TEXT, size, True) for size in (0, 125, 126, 65_535, 65_536)],
    ]


async def test_a_fragment_split_after_its_header_does_not_leave_websockets_inside_it() -> None:
    conn, wire, server = await _opened()
    got: list[bytes] = []
    conn.sink = got.append
    # a binary fragment whose payload starts like a text frame's header
    first = b"\x02\x02\x81\x00"
    last = b"\x80\x00"  # the empty final continuation
    after = b"\x81\x0b" + b'{"after":1}'
    conn.data_received(first[:2])  # its header, not its payload
    assert got == []
    conn.data_received(first[2:] + last + after)
    assert got == [b"\x81\x00", b'{"after":1}']
    assert conn.protocol.state is State.OPEN


async def test_a_masked_server_frame_fails_the_connection_as_websockets_would() -> None:
    conn, wire, server = await _opened()
    got: list[bytes] = []
    conn.sink = got.append
    conn.data_received(b"\x81\x82abcd" + bytes(2) + b"\x81\x01x")
    assert got == []
    server.receive_data(wire.take())
    closes = [f for f in server.events_received() if isinstance(f, Frame)]
    assert closes[0].opcode is Opcode.CLOSE
    assert closes[0].data[:2] == (1002).to_bytes(2, "big")


def test_the_parser_state_is_read_under_the_names_of_websockets_14_too() -> None:
    # websockets 14 (the oldest the SDK accepts) says cur_size and max_size where 15 and
    # later say current_size and max_message_size; state it does not name is never bypassed
    def protocol(**fields: Any) -> Any:
        return SimpleNamespace(
            state=State.OPEN, reader=SimpleNamespace(buffer=bytearray()), **fields
        )

    old = protocol(cur_size=None, max_size=1024)
    assert sansio_ready(old) and message_limit(old) == 1024
    assert not sansio_ready(protocol(cur_size=5, max_size=1024)), "inside a fragmented message"
    new = protocol(current_size=None, max_message_size=2048)
    assert sansio_ready(new) and message_limit(new) == 2048
    new.reader.buffer += b"\x81"
    assert not sansio_ready(new), "websockets holds a partial frame"
    assert not sansio_ready(protocol()) and message_limit(protocol()) is None
    closing = protocol(current_size=None)
    closing.state = State.CLOSING
    assert not sansio_ready(closing)


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
