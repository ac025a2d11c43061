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

Once attached, the common frame (a whole, masked, uncompressed text or binary message
within the size limit) is also parsed here, in one pass over the received bytes, instead
of by ``websockets``' generator-based parser, which cost about a sixth of the server's
CPU per Step. Every other frame (control frames, fragments, compressed or malformed
frames, an oversized one) goes to that parser, fed exactly at a frame boundary, so its
state and its errors stay what they were. Sent messages get their header built here too
while no extension is negotiated.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame
from websockets.protocol import OPEN

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - a build without the C extension
    from websockets.utils import apply_mask

DIRECT_FRAMES = "dex.direct_frames"
"""ASGI scope extension: the connection's :class:`DirectWebSocketProtocol`."""

log = logging.getLogger("dex_server.worker")


class DirectWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's ``websockets-sansio`` protocol plus :data:`DIRECT_FRAMES` (see the module).

    Not thread-safe: everything runs on the server's event loop.
    """

    _sink: Callable[[bytes], None] | None = None
    # the start of a frame the direct parser has not got whole yet, and its bytes needed
    _partial: bytearray | None = None
    _need = 0

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
        if conn.extensions or conn.state is not OPEN:
            conn.send_text(data)
            self.transport.write(b"".join(conn.data_to_send()))
            return True
        # a server's frame: FIN + text, unmasked, the shortest length encoding
        n = len(data)
        if n < 126:
            self.transport.write(bytes((0x81, n)) + data)
        elif n < 0x10000:
            self.transport.write(b"\x81\x7e" + n.to_bytes(2, "big") + data)
        else:
            self.transport.writelines((b"\x81\x7f" + n.to_bytes(8, "big"), data))
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

    def data_received(self, data: bytes) -> None:
        if self._partial is not None:
            self._partial += data
            if len(self._partial) < self._need:
                return
            data, self._partial = bytes(self._partial), None
        if not self._direct_ready():
            super().data_received(data)
            return
        pos, need = self._parse(data)
        if pos < len(data):
            self._partial = bytearray(data[pos:])
            self._need = need - pos

    def _parse(self, data: bytes) -> tuple[int, int]:
        """Hand on the whole frames of ``data``; the offset of what is left and its end.

        A frame it does not take, and all after it, goes to websockets' parser; a control
        frame alone, so that the frames after it are parsed here again.
        """
        end = len(data)
        limit = self.conn.max_message_size
        pos = 0
        while pos < end:
            start, stop = _bounds(data, pos, end)
            if end < start:
                return pos, start
            head1 = data[pos]
            if (head1 != 0x81 and head1 != 0x82) or stop < 0 or (limit and stop - start > limit):
                if head1 & 0x88 == 0x88 and 0 <= stop - start <= 125:
                    if end < stop:
                        return pos, stop
                    super().data_received(data[pos:stop])
                    pos = stop
                    if self._direct_ready():
                        continue
                break
            if end < stop:
                return pos, stop
            self._hand(apply_mask(data[start:stop], data[start - 4 : start]))
            pos = stop
            if self.close_sent:  # the close handshake is websockets' again
                break
        if pos < end:
            super().data_received(data[pos:])
        return end, end

    def _direct_ready(self) -> bool:
        """Whether the next bytes may go to the direct parser.

        That is: attached, open, and websockets' parser at a message boundary with nothing
        buffered.
        """
        conn = self.conn
        return (
            self._sink is not None
            and not self.close_sent
            and conn.state is OPEN
            and conn.current_size is None
            and not conn.reader.buffer
        )

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


def _bounds(data: bytes, pos: int, end: int) -> tuple[int, int]:
    """Where the payload of the client frame at ``pos`` starts and ends.

    A start past ``end``: the header is not all there yet. An end of -1: the frame is not
    masked (which a client's frame must be).
    """
    start = pos + 6  # the shortest masked header
    if end < start:
        return start, start
    length = data[pos + 1] ^ 0x80
    if length == 126:
        start = pos + 8
        if end < start:
            return start, start
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
    elif length == 127:
        start = pos + 14
        if end < start:
            return start, start
        length = int.from_bytes(data[pos + 2 : pos + 10], "big")
    elif length > 127:
        return start, -1
    return start, start + length
