"""A lean HTTP/1.1 client for the SDK's own requests to a Dex server over plain ``http://``.

httpx spends about 1.4 ms of CPU on a request to a local server on the 2-core development
machine, seven times what the server spends answering it: request and URL objects, the
auth flow, httpcore's pool, anyio and h11's state machine. The Client's and the Worker's
requests are small JSON bodies with ``Content-Length`` answers, so they do not need most
of it. :class:`Http1Pool` keeps idle keep-alive connections per pool and writes each
request as one buffer; an :class:`asyncio.Protocol` collects the answer
(``Content-Length``, chunked, or until the server closes).

Failures raise httpx's exception classes (``ConnectError``, ``ReadError``, ``WriteError``,
``RemoteProtocolError``, ``ConnectTimeout``, ``ReadTimeout``, ``PoolTimeout``), so that
``dex._transport`` retries and maps them exactly as it does httpx's own. TLS, proxies and
caller-given httpx clients keep going through httpx (see ``HttpTransport``).

Not thread-safe: a pool belongs to the event loop that first used it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import select
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import cast

import httpx

__all__ = ["Answer", "Http1Pool", "plain_http_target"]

_MAX_HEAD_BYTES = 64 * 1024
# characters a request target keeps as they are when it must be percent-encoded
_TARGET_SAFE = "/%?=&:@!$'()*+,;~-._[]"


def plain_http_target(base_url: str) -> tuple[str, int, str] | None:
    """``(host, port, path prefix)`` of ``base_url`` if the lean client may serve it.

    ``None`` for ``https://`` and other schemes, user info in the URL, or when the
    environment configures an HTTP proxy (httpx honours it, so httpx serves those).
    """
    try:
        url = urllib.parse.urlsplit(base_url)
        port = url.port
    except ValueError:
        return None
    if url.scheme != "http" or not url.hostname or url.username or url.password:
        return None
    proxies = urllib.request.getproxies()
    if "http" in proxies or "all" in proxies:
        return None
    host = url.hostname
    return host, port or 80, url.path.rstrip("/")


class Answer:
    """One HTTP answer: the parts of ``httpx.Response`` the SDK reads."""

    __slots__ = ("content", "headers", "reason_phrase", "status_code")

    def __init__(
        self, status_code: int, reason_phrase: str, headers: dict[str, str], content: bytes
    ) -> None:
        self.status_code = status_code
        self.reason_phrase = reason_phrase
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        """The body decoded as UTF-8 (undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")


class _Connection(asyncio.Protocol):
    """One keep-alive connection; at most one request on it at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._buf = bytearray()
        self._waiter: asyncio.Future[Answer] | None = None
        self._head: tuple[int, str, dict[str, str]] | None = None
        self._body_at = 0
        self._reusable = True

    # asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream transport, though not always an asyncio.Transport subclass (uvloop's)
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None or self._waiter.done():
            # bytes nobody asked for: the connection's framing is lost
            self.close()
            return
        self._buf += data
        try:
            answer = self._parse(eof=False)
        except httpx.RemoteProtocolError as exc:
            self._fail(exc)
            return
        if answer is not None:
            self._finish(answer)

    def eof_received(self) -> bool | None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            try:
                answer = self._parse(eof=True)
            except httpx.RemoteProtocolError as exc:
                self._fail(exc)
                return None
            if answer is not None:
                self._reusable = False
                self._finish(answer)
            elif self._buf:
                self._fail(httpx.RemoteProtocolError("the server closed the answer early"))
            else:
                self._fail(
                    httpx.RemoteProtocolError("Server disconnected without sending a response.")
                )
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(httpx.ReadError(str(exc) if exc else "connection lost"))

    # requests --------------------------------------------------------------------------

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        assert self.transport is not None
        self._buf.clear()
        self._head = None
        self._reusable = True
        self._waiter = asyncio.get_running_loop().create_future()
        try:
            self.transport.write(data)
        except (OSError, RuntimeError) as exc:
            self.close()
            raise httpx.WriteError(str(exc)) from exc
        return self._waiter

    @property
    def reusable(self) -> bool:
        """Whether the last answer left the connection open for the next request."""
        return self._reusable and not self.closed and self.transport is not None

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # internals -------------------------------------------------------------------------

    def _fail(self, exc: Exception) -> None:
        self.close()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _finish(self, answer: Answer) -> None:
        waiter = self._waiter
        self._waiter = None
        self._buf.clear()
        if not self._reusable:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(answer)

    def _parse(self, *, eof: bool) -> Answer | None:
        buf = self._buf
        if self._head is None:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _MAX_HEAD_BYTES:
                    raise httpx.RemoteProtocolError("the answer's head is too large")
                return None
            self._head = _parse_head(bytes(buf[:end]))
            self._body_at = end + 4
            if self._head[2].get("connection", "").lower() == "close":
                self._reusable = False
        status, reason, headers = self._head
        if status in (204, 304) or 100 <= status < 200:
            return Answer(status, reason, headers, b"")
        length = headers.get("content-length")
        if length is not None:
            try:
                n = int(length)
            except ValueError:
                raise httpx.RemoteProtocolError(f"bad Content-Length {length!r}") from None
            have = len(buf) - self._body_at
            if have < n:
                return None
            if have > n:
                raise httpx.RemoteProtocolError("more bytes than the answer's Content-Length")
            return Answer(status, reason, headers, bytes(buf[self._body_at :]))
        if "chunked" in headers.get("transfer-encoding", "").lower():
            return _dechunk(status, reason, headers, buf[self._body_at :])
        # no framing: the body runs until the server closes the connection
        self._reusable = False
        return Answer(status, reason, headers, bytes(buf[self._body_at :])) if eof else None


def _parse_head(head: bytes) -> tuple[int, str, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
        raise httpx.RemoteProtocolError(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise httpx.RemoteProtocolError(f"bad status line {lines[0][:80]!r}") from None
    reason = parts[2] if len(parts) > 2 else ""
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise httpx.RemoteProtocolError(f"bad header line {line[:80]!r}")
        key = name.strip().lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if parts[0] == "HTTP/1.0" and "keep-alive" not in headers.get("connection", "").lower():
        headers["connection"] = "close"  # HTTP/1.0 keeps a connection only when asked to
    return status, reason, headers


def _dechunk(status: int, reason: str, headers: dict[str, str], body: bytearray) -> Answer | None:
    out = bytearray()
    at = 0
    while True:
        end = body.find(b"\r\n", at)
        if end < 0:
            return None
        size_text = bytes(body[at:end]).split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise httpx.RemoteProtocolError(f"bad chunk size {size_text[:20]!r}") from None
        start = end + 2
        if size == 0:
            # trailers (none expected) end with an empty line
            trailer_end = body.find(b"\r\n\r\n", end)
            if body[start : start + 2] == b"\r\n" or trailer_end >= 0:
                return Answer(status, reason, headers, bytes(out))
            return None
        if len(body) < start + size + 2:
            return None
        out += body[start : start + size]
        at = start + size + 2


class Http1Pool:
    """Keep-alive connections to one server, at most ``max_connections`` open at once.

    ``request`` waits for a free connection (``PoolTimeout``), reuses an idle one or
    opens a new one, writes the request and waits for the whole answer; its ``timeout``
    bounds each of those phases, like ``httpx.Timeout(timeout)``. A request cancelled or
    timed out mid-way closes its connection; at most ``max_idle`` idle connections stay
    open. With ``unix`` (a Unix socket's path) the connections go there instead of to
    ``host:port``, which then only names the ``Host`` header.
    """

    def __init__(
        self,
        host: str,
        port: int,
        prefix: str,
        *,
        max_connections: int,
        max_idle: int,
        unix: str | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.unix = unix
        self.prefix = prefix
        self._max = max_connections
        self._max_idle = max_idle
        self._idle: collections.deque[_Connection] = collections.deque()
        self._open = 0
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False
        name = f"[{host}]" if ":" in host else host  # an IPv6 address goes in brackets
        hostport = name if port == 80 else f"{name}:{port}"
        self._host_header = f"Host: {hostport}\r\n".encode("latin-1")

    async def request(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None,
        params: Mapping[str, str] | None,
        headers: Mapping[str, str],
        timeout: float | None,
    ) -> Answer:
        """Send one request and return its answer (any status).

        ``timeout`` bounds the wait for a free connection, the connect, and the answer,
        each (``None``: no bound).

        Raises:
            httpx.TransportError: the subclass naming what failed (see the module).

        """
        target = self.prefix + path
        if params:
            target += "?" + urllib.parse.urlencode(params)
        if not target.isascii():
            target = urllib.parse.quote(target, safe=_TARGET_SAFE)
        lines = [f"{method} {target} HTTP/1.1\r\n".encode(), self._host_header]
        for name, value in headers.items():
            lines.append(f"{name}: {value}\r\n".encode("latin-1"))
        if content is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(b"Content-Length: %d\r\n" % len(content or b""))
        lines.append(b"\r\n")
        if content:
            lines.append(content)
        data = b"".join(lines)
        conn = await self._acquire(timeout)
        keep = False
        try:
            waiter = conn.send(data)
            try:
                async with asyncio.timeout(timeout):
                    answer = await waiter
            except TimeoutError:
                raise httpx.ReadTimeout("timed out waiting for the answer") from None
            keep = conn.reusable
            return answer
        finally:
            self._release(conn, keep=keep)

    async def aclose(self) -> None:
        """Close the idle connections; connections in use close when their request ends."""
        self._closed = True
        while self._idle:
            self._idle.popleft().close()
            self._open -= 1
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_exception(httpx.PoolTimeout("the client was closed"))

    async def _acquire(self, limit: float | None) -> _Connection:
        if self._closed:
            raise httpx.ConnectError("the client was closed")
        while True:
            while self._idle:
                conn = self._idle.pop()  # the most recently used: the least likely stale
                if conn.reusable and not _readable(conn):
                    return conn
                # closed by the server meanwhile (or it sent bytes nobody asked for)
                conn.close()
                self._open -= 1
            if self._open < self._max:
                break
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                async with asyncio.timeout(limit):
                    await waiter
            except BaseException as exc:
                if waiter.done() and not waiter.cancelled():
                    self._wake()  # woken, but leaving: pass the free connection on
                else:
                    with contextlib.suppress(ValueError):
                        self._waiters.remove(waiter)
                if isinstance(exc, TimeoutError):
                    raise httpx.PoolTimeout("no connection became free in time") from None
                raise
        self._open += 1
        try:
            return await self._connect(limit)
        except BaseException:
            self._open -= 1
            self._wake()
            raise

    async def _connect(self, limit: float | None) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(limit):
                if self.unix is not None:
                    _, conn = await loop.create_unix_connection(_Connection, self.unix)
                else:
                    _, conn = await loop.create_connection(_Connection, self.host, self.port)
        except TimeoutError:
            where = self.unix or f"{self.host}:{self.port}"
            raise httpx.ConnectTimeout(f"connecting to {where} timed out") from None
        except OSError as exc:
            raise httpx.ConnectError(str(exc) or type(exc).__name__) from exc
        return conn

    def _release(self, conn: _Connection, *, keep: bool) -> None:
        if keep and not self._closed and len(self._idle) < self._max_idle:
            self._idle.append(conn)
        else:
            conn.close()
            self._open -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return


def _readable(conn: _Connection) -> bool:
    # An idle keep-alive connection with something to read was closed by the server (or
    # is out of step): the event loop may not have run its callbacks yet.
    transport = conn.transport
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return True
    try:
        readable, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(readable)
