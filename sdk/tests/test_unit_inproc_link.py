"""The in-process link on its own: order, close, size limit, loops, the name registry."""

from __future__ import annotations

import asyncio
import threading

import pytest
from dex import AsyncClient, ClientOptions, Registry
from dex._worker import _inproc
from dex._worker._inproc import InProcessEndpoint, Link, LinkClosedError, LinkEnd
from dex.errors import InProcessServerNotFoundError
from websockets.exceptions import ConnectionClosed


def _link(worker_max: int = 1 << 20, server_max: int = 1 << 20) -> Link:
    loop = asyncio.get_running_loop()
    return Link(loop, loop, worker_max_size=worker_max, server_max_size=server_max)


async def test_messages_arrive_in_order_and_those_sent_before_a_close_still_arrive() -> None:
    link = _link()
    for i in range(3):
        link.worker.send(f"w{i}".encode())
    link.server.send("s0")
    link.worker.close(1000, "bye")
    assert [await link.server.recv() for _ in range(3)] == [b"w0", b"w1", b"w2"]
    assert await link.worker.recv() == "s0"
    for end in (link.server, link.worker, link.server):  # the close stays visible
        with pytest.raises(LinkClosedError) as closed:
            await end.recv()
        assert (closed.value.code, closed.value.reason) == (1000, "bye")
    with pytest.raises(LinkClosedError):
        link.server.send("late")


async def test_a_waiting_receiver_wakes_up_for_a_message_and_for_a_close() -> None:
    link = _link()
    waiting = asyncio.create_task(link.server.recv())
    await asyncio.sleep(0)
    link.worker.send(b"hello")
    assert await waiting == b"hello"
    waiting = asyncio.create_task(link.server.recv())
    await asyncio.sleep(0)
    link.server.close(1012, "restart")
    with pytest.raises(LinkClosedError, match="1012"):
        await waiting


async def test_a_message_over_the_receivers_limit_closes_the_link_with_1009() -> None:
    link = _link(server_max=8)
    link.worker.send(b"12345678")  # at the limit: delivered
    link.worker.send(b"123456789")  # over it: the link closes, as a WebSocket would
    assert await link.server.recv() == b"12345678"
    with pytest.raises(LinkClosedError) as closed:
        await link.server.recv()
    assert closed.value.code == 1009
    with pytest.raises(LinkClosedError):
        await link.worker.recv()


async def test_the_worker_side_raises_connection_closed_like_a_websocket() -> None:
    link = _link()
    worker = _inproc.WorkerLink(link.worker)
    await worker.send(b"register", text=True)
    assert await link.server.recv() == b"register"
    link.server.send("one")
    link.server.send("two")
    link.server.close(1000, "")
    assert [m async for m in worker] == ["one", "two"]  # a normal close ends iteration
    with pytest.raises(ConnectionClosed):
        await worker.recv()
    with pytest.raises(ConnectionClosed):
        await worker.send(b"x")


async def test_an_abnormal_close_ends_iteration_with_connection_closed() -> None:
    link = _link()
    worker = _inproc.WorkerLink(link.worker)
    link.server.close(1012, "server shutting down")
    with pytest.raises(ConnectionClosed):
        async for _ in worker:
            pass


async def test_ends_on_two_loops_hand_messages_over_between_threads() -> None:
    server_loop = asyncio.get_running_loop()
    got: list[str | bytes] = []
    done = threading.Event()

    def other_thread() -> None:
        async def run() -> None:
            link = Link(
                asyncio.get_running_loop(),
                server_loop,
                worker_max_size=1 << 20,
                server_max_size=1 << 20,
            )
            server_loop.call_soon_threadsafe(echo.put_nowait, link.server)
            link.worker.send(b"ping")
            got.append(await link.worker.recv())
            link.worker.close(1000, "")

        asyncio.run(run())
        done.set()

    echo: asyncio.Queue[LinkEnd] = asyncio.Queue()
    thread = threading.Thread(target=other_thread)
    thread.start()
    server_end = await asyncio.wait_for(echo.get(), 10)
    assert await asyncio.wait_for(server_end.recv(), 10) == b"ping"
    server_end.send("pong")
    with pytest.raises(LinkClosedError):
        await asyncio.wait_for(server_end.recv(), 10)
    await asyncio.to_thread(thread.join, 10)
    assert done.is_set() and got == ["pong"]


async def test_the_registry_names_unknown_and_taken_names() -> None:
    loop = asyncio.get_running_loop()
    accepted: list[dict[str, str]] = []
    endpoint = InProcessEndpoint("127.0.0.1:1", loop, lambda end, h: accepted.append(h), 100)
    with pytest.raises(InProcessServerNotFoundError, match="inproc://unit-a"):
        _inproc.connect("inproc://unit-a", {}, max_size=100)
    _inproc.register_endpoint("unit-a", endpoint)
    try:
        assert _inproc.is_registered("unit-a")
        with pytest.raises(ValueError, match="already runs"):
            _inproc.register_endpoint("unit-a", endpoint)
        with pytest.raises(InProcessServerNotFoundError, match="running: inproc://unit-a"):
            _inproc.endpoint("inproc://unit-b")
        _inproc.connect("inproc://unit-a/", {"Authorization": "Bearer t"}, max_size=100)
        assert accepted == [{"Authorization": "Bearer t"}]
    finally:
        _inproc.unregister_endpoint("unit-a", endpoint)
    assert not _inproc.is_registered("unit-a")
    with pytest.raises(ValueError):
        _inproc.register_endpoint("a/b", endpoint)


async def test_a_client_given_an_inproc_address_uses_the_embedded_servers_http_api() -> None:
    with pytest.raises(InProcessServerNotFoundError, match="inproc://unit-c"):
        AsyncClient(Registry([]), options=ClientOptions(server_address="inproc://unit-c"))
    loop = asyncio.get_running_loop()
    endpoint = InProcessEndpoint("127.0.0.1:8123", loop, lambda end, h: None, 100)
    _inproc.register_endpoint("unit-c", endpoint)
    try:
        client = AsyncClient(Registry([]), options=ClientOptions(server_address="inproc://unit-c"))
        assert client._http.base_url == "http://127.0.0.1:8123"
        await client.close()
    finally:
        _inproc.unregister_endpoint("unit-c", endpoint)
