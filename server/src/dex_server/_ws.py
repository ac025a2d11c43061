"""The WebSocket connection protocol: uvicorn's sans-I/O protocol with a direct message path.

Through ASGI every message a Worker sends becomes an event dict on a queue that wakes the
endpoint's task, and every message the server sends goes through Starlette's and uvicorn's
``send`` coroutines; uvicorn also pauses reading the socket after each message until the
application took it. On the Worker stream that is most of the server's cost of a frame.

:class:`DirectWebSocketProtocol` offers the endpoint a shortcut once the handshake is done:
the ASGI scope's extensions carry :data:`DIRECT_FRAMES`, an object with which the endpoint
:meth:`~DirectWebSocketProtocol.attach` es a callback that then receives every complete
message synchronously, from the protocol's ``data_received``, and sends messages with
:meth:`~DirectWebSocketProtocol.write_text` without awaiting anything. The handshake,
pings, the close handshake, the message size limit and disconnects stay uvicorn's: a
disconnect still reaches the endpoint as the ASGI ``websocket.disconnect`` event.

Once attached, the common frames are parsed and built directly (``dex._wsframes``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dex._wsframes import (
    DirectFrames,
    frames_sendable,
    message_limit,
    sansio_ready,
    text_frame,
)
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame
from websockets.protocol import Protocol

DIRECT_FRAMES = "dex.direct_frames"
"""ASGI scope extension: the connection's :class:`DirectWebSocketProtocol`."""

log = logging.getLogger("dex_server.worker")


class DirectWebSocketProtocol(DirectFrames, WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol plus :data:`DIRECT_FRAMES` (see the module).

    Not thread-safe: everything runs on the server's event loop.
    """

    _MASKED = True
    _sink: Callable[[bytes], None] | None = None

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            scope["extensions"][DIRECT_FRAMES] = self

    def attach(self, sink: Callable[[bytes], None]) -> None:
        """From now on, hand each complete message (text as UTF-8 bytes) to ``sink``.

        ``sink`` runs inside ``data_received``; an exception it raises is logged and the
        connection closed with 1011. Messages queued for ASGI before this call stay there.
        """
        self._sink = sink

    def write_text(self, data: bytes) -> bool:
        """Send ``data`` (UTF-8 JSON) as one text message now; False if the link is closing."""
        if self.disconnected or self.close_sent or self.transport.is_closing():
            return False
        conn = self.conn
        if frames_sendable(conn):
            self.transport.write(text_frame(data, masked=False))
        else:
            conn.send_text(data)
            self.transport.write(b"".join(conn.data_to_send()))
        return True

    def close_now(self, code: int, reason: str) -> None:
        """Start the close handshake with ``code``; the endpoint then sees a disconnect."""
        if self.disconnected or self.close_sent or self.transport.is_closing():
            return
        self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.conn.send_close(code, reason)
        self.transport.write(b"".join(self.conn.data_to_send()))
        self.close_sent = True
        self.close_timer = self.loop.call_later(self.close_timeout, self.transport.close)

    def _direct_protocol(self) -> Protocol:
        return self.conn

    def _direct_ready(self) -> bool:
        return self._sink is not None and not self.close_sent and sansio_ready(self.conn)

    def _direct_limit(self) -> int | None:
        return message_limit(self.conn)

    def _direct_message(self, data: bytes) -> bool:
        self._hand(data)
        return not self.close_sent  # after a close, the handshake is websockets' again

    def handle_text(self, event: Frame) -> None:
        if self._sink is None:
            super().handle_text(event)
        else:
            self._take(event, first=True)

    def handle_bytes(self, event: Frame) -> None:
        if self._sink is None:
            super().handle_bytes(event)
        else:
            self._take(event, first=True)

    def handle_cont(self, event: Frame) -> None:
        if self._sink is None:
            super().handle_cont(event)
        else:
            self._take(event, first=False)

    def _take(self, event: Frame, *, first: bool) -> None:
        # text and binary alike: the sink gets the bytes (JSON decodes from either)
        if first:
            self.frames = []
        self.frames.append(event.data)  # type: ignore[arg-type]
        if event.fin:
            self._deliver()

    def _deliver(self) -> None:
        frames, self.frames = self.frames, []
        self._hand(bytes(frames[0]) if len(frames) == 1 else b"".join(frames))

    def _hand(self, data: bytes) -> None:
        sink = self._sink
        if self.close_sent or sink is None:
            return
        try:
            sink(data)
        except Exception:
            log.exception("a Worker message could not be handled; closing its connection")
            self.close_now(1011, "internal error")
