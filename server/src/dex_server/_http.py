"""The HTTP/1.1 connection protocol: uvicorn's httptools protocol with the server's limits.

uvicorn with httptools caps neither the size nor the count of request headers, and never
times out a client that connects and then sends its request head or body slowly (or not at
all). :func:`limited_protocol` returns a protocol class that adds, per connection:

- a cap on the bytes of a request head (request line and headers) and on its header count:
  over either, ``431`` and close, before the request reaches the application (and auth);
- a head timeout: the head must arrive whole within ``head_timeout_s`` of the connection's
  opening or of its first byte after an idle keep-alive pause, else ``408`` and close;
- a body timeout: the body must arrive whole within ``body_timeout_s`` of the head's end,
  else the connection is closed (the application sees the client leave);
- a connection cap: a connection beyond ``max_connections`` gets ``503`` and is closed at
  once, so the process never runs out of file descriptors.

Keep-alive idling is uvicorn's ``timeout_keep_alive``. WebSocket connections stop these
timers once upgraded (their liveness is the WebSocket ping).
"""

from __future__ import annotations

import asyncio
import resource
from dataclasses import dataclass
from typing import Any

import msgspec
from dex._protocol import ApiError, ErrorCode
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# File descriptors kept free of connections by the automatic connection cap: the store's
# files and connections, logs, the listening socket.
RESERVED_FDS = 64
# How long a refused connection is still read from (and its input dropped) after the answer.
LINGER_S = 1.0


@dataclass(frozen=True, kw_only=True)
class HttpLimits:
    max_header_bytes: int
    max_header_count: int
    head_timeout_s: float
    body_timeout_s: float
    max_connections: int


def default_max_connections() -> int:
    """The connection cap for this process: its open-file limit less :data:`RESERVED_FDS`."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 65536
    return max(16, soft - RESERVED_FDS)


def _response(status: int, reason: str, code: str, message: str) -> bytes:
    body = msgspec.json.encode(ApiError(code=code, message=message))
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class LimitedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with :class:`HttpLimits`; see :func:`limited_protocol`."""

    limits: HttpLimits
    too_busy: bytes = b""
    head_too_slow: bytes = b""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_pending = True
        self._head_bytes = 0
        self._header_count = 0
        self._refused = False
        self._head_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None

    # -- connection

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self._refused = True
            self._answer_and_close(self.too_busy)
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timers()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._head_pending:
            if self._head_timer is None:
                self._arm_head_timer()
            room = self.limits.max_header_bytes - self._head_bytes
            if len(data) > room:
                # feed only what the cap allows: the parser must never see a huge head
                head, rest = data[: max(room, 0)], data[max(room, 0) :]
                self._head_bytes += len(head)
                if head:
                    super().data_received(head)
                if self._refused or self.transport.get_protocol() is not self:
                    return
                if self._head_pending:
                    self._refuse_head_size()
                    return
                if rest:
                    self.data_received(rest)
                return
            self._head_bytes += len(data)
        super().data_received(data)

    def handle_websocket_upgrade(self) -> None:
        if self._refused:
            return
        self._cancel_timers()
        self._head_pending = False
        super().handle_websocket_upgrade()

    # -- parser callbacks

    def on_url(self, url: bytes) -> None:
        if not self._refused:
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused:
            return
        self._header_count += 1
        if self._header_count > self.limits.max_header_count:
            self._refuse(
                _response(
                    431,
                    "Request Header Fields Too Large",
                    ErrorCode.LIMIT_EXCEEDED,
                    f"the request has over {self.limits.max_header_count} headers, over the"
                    f" limit max_header_count={self.limits.max_header_count}",
                )
            )
            return
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused:
            return
        self._head_pending = False
        self._cancel_head_timer()
        super().on_headers_complete()
        if not self.parser.should_upgrade():
            self._body_timer = self.loop.call_later(self.limits.body_timeout_s, self._body_late)

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused:
            return
        self._cancel_body_timer()
        self._head_pending = True
        self._head_bytes = 0
        self._header_count = 0
        super().on_message_complete()

    # -- limits

    def _refuse_head_size(self) -> None:
        self._refuse(
            _response(
                431,
                "Request Header Fields Too Large",
                ErrorCode.LIMIT_EXCEEDED,
                f"the request head is over {self.limits.max_header_bytes} bytes, over the"
                f" limit max_header_bytes={self.limits.max_header_bytes}",
            )
        )

    def _refuse(self, response: bytes) -> None:
        self._refused = True
        self._cancel_timers()
        if self.cycle is None or self.cycle.response_complete:
            # nothing else is writing on this connection
            self._answer_and_close(response)
        else:
            self.transport.close()

    def _answer_and_close(self, response: bytes) -> None:
        # A close with unread input makes the kernel reset the connection, and the client
        # may lose the answer: send it, half-close, and read (dropping it) a little longer.
        self.transport.write(response)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_late)

    def _head_late(self) -> None:
        self._head_timer = None
        if self._refused or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            # a pipelined head behind a running request: its clock starts after
            self._arm_head_timer()
            return
        if self._head_bytes == 0:
            self._refused = True
            self.transport.close()  # idle since it connected: nothing to answer
            return
        self._refuse(self.head_too_slow)

    def _body_late(self) -> None:
        self._body_timer = None
        if not self.transport.is_closing():
            self._refused = True
            self.transport.close()

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _cancel_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _cancel_timers(self) -> None:
        self._cancel_head_timer()
        self._cancel_body_timer()


def limited_protocol(limits: HttpLimits) -> type[asyncio.Protocol]:
    """Return an HTTP protocol class for uvicorn's ``http=`` that enforces ``limits``."""
    too_busy = _response(
        503,
        "Service Unavailable",
        ErrorCode.UNAVAILABLE,
        f"too many connections, over the limit max_connections={limits.max_connections}",
    )
    head_too_slow = _response(
        408,
        "Request Timeout",
        ErrorCode.REQUEST_TIMEOUT,
        f"the request head did not arrive within http_head_timeout_s={limits.head_timeout_s:g}",
    )
    return type(
        "LimitedHttpProtocol",
        (LimitedHttpProtocol,),
        {"limits": limits, "too_busy": too_busy, "head_too_slow": head_too_slow},
    )
