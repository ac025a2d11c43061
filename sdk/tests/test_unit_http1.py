"""The lean HTTP/1.1 client (``dex._http1``) against real sockets.

Each test runs a small asyncio server on a loopback port that answers the way the case
needs (keep-alive, chunked, slow, closing early) and counts its connections; the client
is ``HttpTransport`` as the Client uses it, or ``Http1Pool`` itself.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from dex._http1 import Http1Pool, plain_http_target
from dex._transport import HttpTransport
from dex.errors import RequestTimeoutError, ServiceUnavailableError

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter
Handler = Callable[[Reader, Writer, "Server"], Awaitable[None]]


class Server:
    """A loopback server running ``handler`` per connection; counts and records."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.open = 0
        self.most_open = 0
        self.requests: list[bytes] = []
        self.closed = asyncio.Event()
        self.address = ""
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"127.0.0.1:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 2)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open += 1
        self.most_open = max(self.most_open, self.open)
        try:
            await self.handler(reader, writer, self)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.open -= 1
            self.closed.set()
            writer.close()


async def read_request(reader: asyncio.StreamReader, server: Server) -> bytes | None:
    """One request (head and Content-Length body); None when the client closed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length)
    server.requests.append(head + body)
    return head + body


def answer(body: bytes, *, status: str = "200 OK", extra: bytes = b"") -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n".encode()
        + extra
        + b"\r\n"
        + body
    )


def answers_once(raw: bytes) -> Handler:
    """A handler that reads one request, writes ``raw`` and closes the connection."""

    async def handler(reader: Reader, writer: Writer, s: Server) -> None:
        await read_request(reader, s)
        writer.write(raw)
        await writer.drain()

    return handler


async def keep_alive(reader: Reader, writer: Writer, s: Server) -> None:
    while await read_request(reader, s) is not None:
        writer.write(answer(b'{"ok":true}'))
        await writer.drain()


@contextlib.asynccontextmanager
async def transport(address: str, **kwargs: object) -> AsyncIterator[HttpTransport]:
    t = HttpTransport(address, credential=kwargs.pop("credential", None), timeout=5, **kwargs)  # type: ignore[arg-type]
    try:
        yield t
    finally:
        await t.aclose()


async def test_requests_share_one_kept_alive_connection() -> None:
    async with Server(keep_alive) as server, transport(server.address) as t:
        for n in range(20):
            got = await t.raw("POST", f"/v1/flows/f{n}/rpc", body={"n": n})
            assert got.content == b'{"ok":true}'
        await t.raw("GET", "/v1/health", params={"a": "b c"})
        assert t._lean is not None  # the lean client served plain http://
    assert server.connections == 1
    first = server.requests[0]
    assert first.startswith(b"POST /v1/flows/f0/rpc HTTP/1.1\r\n")
    assert b"\r\nContent-Type: application/json\r\n" in first
    assert first.endswith(b'\r\n\r\n{"n":0}')
    assert server.requests[-1].startswith(b"GET /v1/health?a=b+c HTTP/1.1\r\n")


def test_requests_on_a_uvloop_event_loop() -> None:
    # uvloop's transports do not derive from asyncio.Transport; an application served by
    # uvicorn runs on uvloop whenever it is installed
    uvloop = pytest.importorskip("uvloop")

    async def requests() -> None:
        async with Server(keep_alive) as server, transport(server.address) as t:
            for n in range(3):
                got = await t.raw("POST", f"/v1/flows/f{n}/rpc", body={"n": n})
                assert got.content == b'{"ok":true}'
            assert t._lean is not None
        assert server.connections == 1

    uvloop.run(requests())


async def test_chunked_answers_split_across_packets() -> None:
    async def chunked(reader: Reader, writer: Writer, s: Server) -> None:
        while await read_request(reader, s) is not None:
            writer.write(b'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n4\r\n{"a"')
            await writer.drain()
            await asyncio.sleep(0.01)
            writer.write(b"\r\n3;x=1\r\n:12\r\n1\r\n}\r\n0\r\n\r\n")
            await writer.drain()

    async with Server(chunked) as server, transport(server.address) as t:
        for _ in range(3):
            assert (await t.raw("GET", "/x")).content == b'{"a":12}'
    assert server.connections == 1


async def test_an_answer_without_framing_ends_with_the_connection() -> None:
    close_delimited = answers_once(b"HTTP/1.0 503 Service Unavailable\r\n\r\nbusy")
    async with Server(close_delimited) as server, transport(server.address) as t:
        with pytest.raises(ServiceUnavailableError) as raised:
            await t.raw("GET", "/x")
        assert "HTTP 503: busy" in str(raised.value)
        with pytest.raises(ServiceUnavailableError):
            await t.raw("GET", "/x")
    assert server.connections == 2  # an HTTP/1.0 answer is not reused


async def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    # keep-alive announced, but closed after one answer (an idle timeout that ran out)
    one_each = answers_once(answer(b"{}"))
    async with Server(one_each) as server, transport(server.address) as t:
        for n in range(3):
            await t.raw("POST", "/v1/flows/f/rpc", body={"n": n})  # not idempotent: no retry
            await asyncio.wait_for(server.closed.wait(), 5)
            server.closed.clear()
    assert server.connections == 3
    assert len(server.requests) == 3


async def test_a_post_the_server_drops_unanswered_fails_without_a_second_send() -> None:
    async def drop(reader: Reader, writer: Writer, s: Server) -> None:
        await read_request(reader, s)

    async with Server(drop) as server, transport(server.address) as t:
        with pytest.raises(ServiceUnavailableError) as raised:
            await t.raw("POST", "/v1/flows/f/rpc", body={})
        assert "RemoteProtocolError" in str(raised.value)
        assert raised.value.retryable
        assert len(server.requests) == 1
        # a GET is sent again on a fresh connection, twice at most
        with pytest.raises(ServiceUnavailableError):
            await t.raw("GET", "/v1/flows/f")
        assert len(server.requests) == 4


async def test_a_truncated_body_is_a_protocol_error() -> None:
    short = answers_once(b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\n{}")
    async with Server(short) as server, transport(server.address) as t:
        with pytest.raises(ServiceUnavailableError) as raised:
            await t.raw("POST", "/x", body={})
        assert "closed the answer early" in str(raised.value)
    assert server.connections == 1


async def test_a_slow_answer_times_out_and_its_connection_is_dropped() -> None:
    release = asyncio.Event()

    async def slow(reader: Reader, writer: Writer, s: Server) -> None:
        while await read_request(reader, s) is not None:
            if len(s.requests) == 1:
                await release.wait()
            writer.write(answer(b"{}"))
            await writer.drain()

    async with Server(slow) as server, transport(server.address) as t:
        with pytest.raises(RequestTimeoutError):
            await t.raw("POST", "/x", body={}, timeout=0.2)
        release.set()
        await t.raw("POST", "/x", body={})
    assert server.connections == 2  # the timed-out one could still get its late answer


async def test_an_unreachable_server_is_unavailable() -> None:
    async with Server(keep_alive) as server:
        address = server.address
    async with transport(address) as t:
        with pytest.raises(ServiceUnavailableError) as raised:
            await t.raw("GET", "/v1/health")
    assert "cannot reach the Dex server (ConnectError" in str(raised.value)


async def test_the_pool_limit_queues_requests_and_cancelling_drops_the_connection() -> None:
    gate = asyncio.Event()

    async def gated(reader: Reader, writer: Writer, s: Server) -> None:
        while await read_request(reader, s) is not None:
            await gate.wait()
            writer.write(answer(b"{}"))
            await writer.drain()

    async with Server(gated) as server:
        host, port, prefix = plain_http_target(f"http://{server.address}") or ("", 0, "")
        pool = Http1Pool(host, port, prefix, max_connections=2, max_idle=2)
        try:

            async def one() -> int:
                got = await pool.request(
                    "GET", "/x", content=None, params=None, headers={}, timeout=5
                )
                return got.status_code

            calls = [asyncio.create_task(one()) for _ in range(5)]
            while len(server.requests) < 2:
                await asyncio.sleep(0.01)
            assert server.open == 2
            gate.set()
            assert await asyncio.gather(*calls) == [200] * 5
            assert server.most_open == 2
            # a request cancelled while its answer is outstanding closes its connection
            gate.clear()
            stuck = asyncio.create_task(one())
            while len(server.requests) < 6:
                await asyncio.sleep(0.01)
            before = server.connections
            stuck.cancel()
            with pytest.raises(asyncio.CancelledError):
                await stuck
            gate.set()
            assert await one() == 200
            assert server.connections in (before, before + 1)
            assert pool._open <= 2
        finally:
            await pool.aclose()


class _Rotating:
    def __init__(self) -> None:
        self.tokens = iter(["one", "two"])

    def token(self) -> str:
        return next(self.tokens)


async def test_the_bearer_token_is_read_for_every_request() -> None:
    async with (
        Server(keep_alive) as server,
        transport(server.address, credential=_Rotating()) as t,
    ):
        await t.raw("GET", "/a")
        await t.raw("GET", "/b")
    assert b"\r\nAuthorization: Bearer one\r\n" in server.requests[0]
    assert b"\r\nAuthorization: Bearer two\r\n" in server.requests[1]


def test_https_proxies_and_user_info_go_through_httpx(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert plain_http_target("http://localhost:8801/base/") == ("localhost", 8801, "/base")
    assert plain_http_target("http://[::1]:9") == ("::1", 9, "")
    assert plain_http_target("https://localhost:8801") is None
    assert plain_http_target("http://user:pw@localhost:8801") is None
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.invalid:3128")
    assert plain_http_target("http://localhost:8801") is None


async def test_with_a_proxy_in_the_environment_requests_go_through_httpx(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with Server(keep_alive) as server:
        monkeypatch.setenv("HTTP_PROXY", f"http://{server.address}")
        monkeypatch.setenv("NO_PROXY", "")
        async with transport("dex.invalid:8801") as t:
            await t.raw("GET", "/v1/health")
            assert t._lean is None and not t._lean_wanted
    # httpx sent it to the proxy, in the absolute form a proxy gets
    assert server.requests[0].startswith(b"GET http://dex.invalid:8801/v1/health HTTP/1.1")
