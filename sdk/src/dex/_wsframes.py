"""Direct WebSocket framing for the Worker link, on top of ``websockets``' sans-I/O protocol.

Both ends of the Worker link (the server's uvicorn protocol and the Worker's asyncio client
connection) exchange mostly small, whole, uncompressed text messages. ``websockets`` parses
each with a generator-based parser and builds each with a ``Frame`` object; doing both
here saves about 3 % of the server's instructions per Step and 11 % of the Worker's
(``bench/step_ir.py``). :class:`DirectFrames` parses those common frames in one pass over
the received bytes and hands their payload on; every other frame (control frames,
fragments, compressed, malformed or oversized frames) still goes to ``websockets``, fed
one whole frame at a time while the connection is open, so its state, its answers (pongs,
the close handshake) and its errors stay what they were, and its parser is never left
inside a frame whose header it has read. :func:`text_frame` builds a whole text frame for
sending while no extension is negotiated.
"""

from __future__ import annotations

import asyncio
import os
from typing import ClassVar

from websockets.protocol import OPEN, Protocol

try:
    from websockets.speedups import apply_mask
except ImportError:  # pragma: no cover - a build without the C extension
    from websockets.utils import apply_mask

__all__ = ["DirectFrames", "frames_sendable", "message_limit", "sansio_ready", "text_frame"]


_ABSENT = object()


def sansio_ready(protocol: Protocol) -> bool:
    """Whether ``websockets``' parser is open, between messages and holds no bytes.

    Only then may the next received bytes bypass it. It cannot tell a parser between
    frames from one that read a frame's header and waits for its payload: that is why
    :class:`DirectFrames` feeds it whole frames only. A ``websockets`` version that keeps
    this state under other names is never bypassed.
    """
    if protocol.state is not OPEN:
        return False
    # the size of the message being received: current_size from websockets 15, cur_size in 14
    size = getattr(protocol, "current_size", _ABSENT)
    if size is _ABSENT:
        size = getattr(protocol, "cur_size", _ABSENT)
    buffer = getattr(getattr(protocol, "reader", None), "buffer", None)
    return size is None and buffer is not None and not buffer


def message_limit(protocol: Protocol) -> int | None:
    """The largest message ``protocol`` accepts (None: no limit)."""
    limit = getattr(protocol, "max_message_size", _ABSENT)  # websockets 15 and later
    if limit is _ABSENT:
        limit = getattr(protocol, "max_size", None)  # websockets 14
    return limit if isinstance(limit, int) else None


def frames_sendable(protocol: Protocol) -> bool:
    """Whether a message may go out as one :func:`text_frame`: open, no extension."""
    return protocol.state is OPEN and not protocol.extensions


def text_frame(data: bytes, *, masked: bool) -> bytes:
    """``data`` as one whole text frame (a client's masked with a random key)."""
    n = len(data)
    if n < 126:
        head = bytes((0x81, n | 0x80 if masked else n))
    elif n < 0x10000:
        head = (b"\x81\xfe" if masked else b"\x81\x7e") + n.to_bytes(2, "big")
    else:
        head = (b"\x81\xff" if masked else b"\x81\x7f") + n.to_bytes(8, "big")
    if not masked:
        return head + data
    key = os.urandom(4)
    return head + key + apply_mask(data, key)


class DirectFrames(asyncio.Protocol):
    """A mixin for a ``websockets``-based protocol: received data frames parsed directly.

    Put it before the protocol class in the bases; the class sets ``_MASKED`` (whether the
    peer's frames are masked: True on a server) and implements the four hooks. Not
    thread-safe: everything runs on the connection's event loop.
    """

    _MASKED: ClassVar[bool]
    # the start of a frame not yet whole, and the bytes it needs
    _partial: bytearray | None = None
    _need = 0

    def _direct_protocol(self) -> Protocol:
        """The ``websockets`` protocol the other frames go to."""
        raise NotImplementedError

    def _direct_ready(self) -> bool:
        """Whether received bytes may be parsed here now (see :func:`sansio_ready`)."""
        raise NotImplementedError

    def _direct_limit(self) -> int | None:
        """The largest message accepted; a larger frame goes to ``websockets``."""
        raise NotImplementedError

    def _direct_message(self, data: bytes) -> bool:
        """Take one whole message; False when the direct path ends with it."""
        raise NotImplementedError

    def data_received(self, data: bytes) -> None:
        if self._partial is not None:
            self._partial += data
            if len(self._partial) < self._need:
                return
            data, self._partial = bytes(self._partial), None
        if self._direct_protocol().state is not OPEN:  # the handshake, or the close's
            super().data_received(data)
            return
        pos, need = self._split(data)
        if pos < len(data):
            self._partial = bytearray(data[pos:])
            self._need = need - pos

    def _split(self, data: bytes) -> tuple[int, int]:
        """Hand on the whole frames of ``data``; the offset of what is left and its end."""
        end = len(data)
        limit = self._direct_limit()
        masked = self._MASKED
        pos = 0
        while pos < end:
            start, stop = _bounds(data, pos, end, masked)
            if end < start:
                return pos, start
            if stop < 0 or (limit and stop - start > limit):
                break  # websockets fails the connection on this header
            if end < stop:
                return pos, stop
            head1 = data[pos]
            if (head1 == 0x81 or head1 == 0x82) and self._direct_ready():
                payload = data[start:stop]
                if masked:
                    payload = apply_mask(payload, data[start - 4 : start])
                pos = stop
                if not self._direct_message(payload):
                    break
            else:
                super().data_received(data[pos:stop])
                pos = stop
                if self._direct_protocol().state is not OPEN:
                    break
        if pos < end:
            super().data_received(data[pos:])
        return end, end


def _bounds(data: bytes, pos: int, end: int, masked: bool) -> tuple[int, int]:
    """Where the payload of the frame at ``pos`` starts and ends.

    A start past ``end``: the header is not all there yet. An end of -1: the mask bit is
    not what this end expects (a client's frames are masked, a server's are not).
    """
    start = pos + (6 if masked else 2)
    if end < start:
        return start, start
    length = data[pos + 1] ^ 0x80 if masked else data[pos + 1]
    if length == 126:
        start += 2
        if end < start:
            return start, start
        length = int.from_bytes(data[pos + 2 : pos + 4], "big")
    elif length == 127:
        start += 8
        if end < start:
            return start, start
        length = int.from_bytes(data[pos + 2 : pos + 10], "big")
    elif length > 127:
        return start, -1
    return start, start + length
