"""Stream: a best-effort, resumable message stream written by Steps and read by Clients."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dex._state._common import check_name, invocation
from dex._step import StreamOutput
from dex.errors import DexError, FlowDefinitionError

if TYPE_CHECKING:
    import asyncio

    from dex._context import Context, _Invocation

T = TypeVar("T")

DEFAULT_STREAM_CAPACITY_BYTES = 10 * 1024 * 1024


class Stream(Generic[T]):
    """A best-effort stream of ``T`` values (not durable state, not in history).

    Step handlers write with ``write(ctx, value)``; Clients read with ``read_stream`` /
    ``list_stream_messages``. Each Step write gets ``source = "#<stepExecutionId>"``.
    Writes are not deduplicated across retries, and old messages are trimmed beyond
    ``stream_capacity_bytes``. RPC handlers cannot write Streams.

    Args:
        name: unique, non-empty, without ``/``.
        value_type: the declared value type.
        stream_capacity_bytes: approximate retained bytes (positive; default 10 MiB).

    """

    kind = "stream"

    def __init__(
        self,
        name: str,
        value_type: type[T],
        stream_capacity_bytes: int = DEFAULT_STREAM_CAPACITY_BYTES,
    ) -> None:
        self.name = check_name(name, "Stream")
        self.value_type: Any = value_type
        if stream_capacity_bytes <= 0:
            raise FlowDefinitionError(f"Stream {name!r}: stream_capacity_bytes must be positive")
        self.stream_capacity_bytes = stream_capacity_bytes

    def _inv(self, ctx: Context) -> _Invocation:
        inv = invocation(ctx, self, "stream")
        if inv.kind == "rpc":
            raise DexError("Streams can only be written from Step handlers, not from RPCs")
        return inv

    def write(self, ctx: Context, value: T) -> StreamOutput:
        """Write one value.

        In an ``async def`` handler (and a plain sync handler) the value is sent at once; in
        a sync generator handler ``yield`` the returned frame to send it.

        Raises:
            DexError: called from an RPC handler.
            ValueMappingError: ``value`` does not match the declared type.

        """
        inv = self._inv(ctx)
        return _send(inv, self.name, inv.codec(self.value_type).encode(value))

    def buffered_text(
        self,
        ctx: Context,
        flush_interval: timedelta | float = 1.0,
        max_buffered_bytes: int = 16 * 1024,
    ) -> BufferedText:
        """Return a writer that batches small ``str`` chunks into fewer Stream messages.

        It flushes when ``max_buffered_bytes`` are buffered or ``flush_interval`` passed
        (in async handlers by a timer) and always before the handler's result is sent.
        """
        inv = self._inv(ctx)
        seconds = (
            flush_interval.total_seconds()
            if isinstance(flush_interval, timedelta)
            else float(flush_interval)
        )
        buf = BufferedText(self, inv, seconds, max_buffered_bytes)
        inv.buffers.append(buf)
        return buf

    def __repr__(self) -> str:
        return f"Stream({self.name!r})"


def _send(inv: _Invocation, name: str, data: bytes) -> StreamOutput:
    io = inv.io
    if io is None or inv.stream_mode == "frame":
        return StreamOutput(name, data)
    if inv.stream_mode == "direct":
        io.stream_write(name, data)
    else:
        assert inv.loop is not None
        inv.loop.call_soon_threadsafe(io.stream_write, name, data)
    return StreamOutput(name, data, sent=True)


class BufferedText:
    """Batches ``str`` chunks for a ``Stream[str]`` (from ``stream.buffered_text(ctx)``).

    ``write(text)`` returns a frame when the write caused a flush (yield it in a sync
    generator; it was already sent in other handlers), else None. ``flush()`` sends what is
    buffered. Remaining text is flushed automatically before the handler's result.
    """

    def __init__(
        self, stream: Stream[Any], inv: _Invocation, interval: float, max_bytes: int
    ) -> None:
        self._stream = stream
        self._inv = inv
        self._interval = interval
        self._max = max_bytes
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.emitted: list[StreamOutput] = []  # frames handed out in "frame" mode

    def write(self, text: str) -> StreamOutput | None:
        """Buffer ``text``; flush if the size or time budget is reached."""
        if not isinstance(text, str):
            raise TypeError(f"buffered_text takes str chunks, got {type(text).__qualname__}")
        if not text:
            return None
        if not self._parts:
            self._since = time.monotonic()
        self._parts.append(text)
        self._size += len(text.encode())
        if self._size >= self._max or time.monotonic() - self._since >= self._interval:
            return self.flush()
        if self._inv.stream_mode == "direct" and self._timer is None and self._inv.loop:
            self._timer = self._inv.loop.call_later(self._interval, self._on_timer)
        return None

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> StreamOutput | None:
        """Send (or return for yielding) the buffered text; None when nothing is buffered."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._parts:
            return None
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        data = self._inv.codec(self._stream.value_type).encode(text)
        frame = _send(self._inv, self._stream.name, data)
        if not frame.sent:
            self.emitted.append(frame)
        return frame
