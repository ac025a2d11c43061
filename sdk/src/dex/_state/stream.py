"""Stream: a best-effort, resumable message stream written by Steps and read by Clients."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from dex._state._common import check_name, invocation
from dex._step import StreamOutput
from dex.errors import DexError, FlowDefinitionError

if TYPE_CHECKING:
    import asyncio

    from dex._context import AsyncContext, Context, _Invocation

T = TypeVar("T")

DEFAULT_STREAM_CAPACITY_BYTES = 10 * 1024 * 1024
_DEFAULT_FLUSH_INTERVAL = timedelta(seconds=1)


class Stream(Generic[T]):
    """A best-effort stream of ``T`` values (not durable state, not in history).

    Step handlers write with ``write(context, value)``; Clients read with ``read_stream`` /
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

    def _inv(self, context: Context) -> _Invocation:
        inv = invocation(context, self, "stream")
        if inv.kind == "rpc":
            raise DexError("Streams can only be written from Step handlers, not from RPCs")
        return inv

    def write(self, context: Context, value: T, *, after_commit: bool = False) -> StreamOutput:
        """Write one value.

        In an ``async def`` handler (and a plain sync handler) the value is sent at once; in
        a sync generator handler ``yield`` the returned frame to send it.

        With ``after_commit=True`` (beyond the Dex model) the value travels inside the
        handler's result instead, and the server appends it only once that result has
        committed: a reader who sees it also sees the state the Step wrote. It is dropped
        when the attempt fails. Such values follow every value written at once by the same
        attempt; use it for a message that announces committed state (``approval
        pending``, ``order shipped``), and plain writes for live progress. A generator
        handler need not yield the returned frame.

        Raises:
            DexError: called from an RPC handler.
            ValueMappingError: ``value`` does not match the declared type.

        """
        inv = self._inv(context)
        data = inv.codec(self.value_type).encode(value)
        if after_commit:
            inv.after_commit.append((self.name, data))
            return StreamOutput(self.name, data, sent=True)
        return _send(inv, self.name, data)

    @overload
    def buffered_text(  # type: ignore[overload-overlap]  # an AsyncContext is a Context
        self: Stream[str],
        context: AsyncContext,
        *,
        flush_interval: timedelta | float = ...,
        max_buffered_bytes: int = ...,
    ) -> AsyncBufferedTextStream: ...

    @overload
    def buffered_text(
        self: Stream[str],
        context: Context,
        *,
        flush_interval: timedelta | float = ...,
        max_buffered_bytes: int = ...,
    ) -> BufferedTextStream: ...

    def buffered_text(
        self: Stream[str],
        context: Context,
        *,
        flush_interval: timedelta | float = _DEFAULT_FLUSH_INTERVAL,
        max_buffered_bytes: int = 16 * 1024,
    ) -> AsyncBufferedTextStream | BufferedTextStream:
        """Return a writer that batches small ``str`` chunks into fewer Stream messages.

        In an ``async def`` handler it is an :class:`AsyncBufferedTextStream` (a timer
        flushes); in a sync handler a :class:`BufferedTextStream` (flushes happen inside
        ``write``; a sync generator yields the frames ``write`` returns). Either flushes
        when ``max_buffered_bytes`` are buffered or ``flush_interval`` (a ``timedelta`` or
        seconds; default 1 s) has passed since the first buffered chunk, and always before
        the handler's result is sent. For type checkers the result follows the
        context's declared type (``AsyncContext`` or ``Context``).

        Raises:
            DexError: called from an RPC handler.
            ValueError: a non-positive ``flush_interval`` or ``max_buffered_bytes``.

        """
        if self._inv(context).stream_mode == "direct":
            return AsyncBufferedTextStream(self, context, flush_interval, max_buffered_bytes)
        return BufferedTextStream(self, context, flush_interval, max_buffered_bytes)

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
    """Batches ``str`` chunks for a ``Stream[str]``: the base of the two buffered writers.

    Use ``stream.buffered_text(context)``, which picks :class:`BufferedTextStream` or
    :class:`AsyncBufferedTextStream` for the handler. Text still buffered when the handler
    returns is flushed before its result. A writer belongs to one handler invocation and
    is not thread-safe.

    Args:
        stream: the ``Stream[str]`` to write (declared in the Flow's schema).
        context: the running Step handler's context.
        flush_interval: the longest a chunk waits (``timedelta`` or seconds; positive).
        max_buffered_bytes: flush once this many UTF-8 bytes are buffered (positive).

    Raises:
        DexError: ``context`` is an RPC's.
        ValueError: a non-positive interval or size.

    """

    def __init__(
        self,
        stream: Stream[str],
        context: Context,
        flush_interval: timedelta | float,
        max_buffered_bytes: int,
    ) -> None:
        inv = stream._inv(context)
        interval = (
            flush_interval.total_seconds()
            if isinstance(flush_interval, timedelta)
            else float(flush_interval)
        )
        if interval <= 0:
            raise ValueError(f"flush_interval must be positive, got {flush_interval!r}")
        if isinstance(max_buffered_bytes, bool) or not isinstance(max_buffered_bytes, int):
            raise TypeError(f"max_buffered_bytes must be an int, got {max_buffered_bytes!r}")
        if max_buffered_bytes <= 0:
            raise ValueError(f"max_buffered_bytes must be positive, got {max_buffered_bytes}")
        self._stream = stream
        self._inv = inv
        self._interval = interval
        self._max = max_buffered_bytes
        self._parts: list[str] = []
        self._size = 0
        self._since = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.emitted: list[StreamOutput] = []  # frames handed out in "frame" mode
        inv.buffers.append(self)

    def _buffer(self, text: str) -> tuple[StreamOutput, ...]:
        if not isinstance(text, str):
            raise TypeError(f"buffered_text takes str chunks, got {type(text).__qualname__}")
        if not text:
            return ()
        if not self._parts:
            self._since = time.monotonic()
        self._parts.append(text)
        self._size += len(text.encode())
        if self._size >= self._max or time.monotonic() - self._since >= self._interval:
            return self.flush()
        if self._inv.stream_mode == "direct" and self._timer is None and self._inv.loop:
            self._timer = self._inv.loop.call_later(self._interval, self._on_timer)
        return ()

    def _on_timer(self) -> None:
        self._timer = None
        self.flush()

    def flush(self) -> tuple[StreamOutput, ...]:
        """Send what is buffered now; return the frame (none when nothing was buffered).

        In a sync generator handler, ``yield`` the returned frames; elsewhere they were
        already sent (``frame.sent`` is True).
        """
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._parts:
            return ()
        text = "".join(self._parts)
        self._parts.clear()
        self._size = 0
        data = self._inv.codec(self._stream.value_type).encode(text)
        frame = _send(self._inv, self._stream.name, data)
        if not frame.sent:
            self.emitted.append(frame)
        return (frame,)


class BufferedTextStream(BufferedText):
    """The buffered text writer of sync Step handlers (``stream.buffered_text(context)``).

    ``write(chunk)`` returns the frames its flush produced, if any: a sync generator
    handler yields them (``for frame in buffered.write(chunk): yield frame``); in a plain
    sync handler they were already sent. ``flush()`` does the same for what is buffered.
    """

    def write(self, chunk: str) -> tuple[StreamOutput, ...]:
        """Buffer ``chunk``; flush when the size or time budget is reached.

        Raises:
            TypeError: ``chunk`` is not a ``str``.

        """
        return self._buffer(chunk)


class AsyncBufferedTextStream(BufferedText):
    """The buffered text writer of ``async def`` Step handlers.

    ``write(chunk)`` buffers; a timer on the handler's event loop flushes after
    ``flush_interval``, a full buffer flushes at once, and ``flush()`` flushes now.
    """

    def write(self, chunk: str) -> None:
        """Buffer ``chunk`` (sent within ``flush_interval``).

        Raises:
            TypeError: ``chunk`` is not a ``str``.

        """
        self._buffer(chunk)
