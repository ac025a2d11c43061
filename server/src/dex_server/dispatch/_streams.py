"""Best-effort Streams, kept in memory per ``(flow_type, stream, flow_id)``.

Streams do not survive a server restart: they are a live channel for progress (tokens,
events), not durable state. Each stream is trimmed, oldest first, to its declared
``stream_capacity_bytes``, and freed when retention deletes its Flow. Resume tokens are
increasing sequence numbers (as strings). A Stream numbers its messages on from the wall
clock in microseconds at its creation, so a token a reader got before a restart is below
every new one: resuming with it returns what was written since, not nothing until the new
numbers catch up with it.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import time
from collections import deque
from collections.abc import Callable

import msgspec
from dex._protocol import StreamMessageWire


class _Msg(msgspec.Struct, frozen=True, kw_only=True):
    seq: int
    value: bytes
    created: float
    source: str


def clock_base() -> int:
    """The sequence number a new Stream starts from: the wall clock in microseconds."""
    return time.time_ns() // 1000


class _Stream:
    def __init__(self, capacity: int, base: int) -> None:
        self.capacity = capacity
        self.msgs: deque[_Msg] = deque()
        self.bytes = 0
        self.seq = base
        self.waiters: list[asyncio.Future[None]] = []


def _wire(m: _Msg) -> StreamMessageWire:
    return StreamMessageWire(
        value=msgspec.Raw(m.value), resume_token=str(m.seq), created_time=m.created, source=m.source
    )


class StreamHub:
    """All Streams of this server process.

    A Stream lives from its first write (or while a reader waits on it) until retention
    deletes its Flow (:meth:`drop_flow`); a long poll leaves nothing behind when it ends.
    """

    def __init__(self, token_base: Callable[[], int] = clock_base) -> None:
        self._token_base = token_base
        self._streams: dict[tuple[str, str, str], _Stream] = {}
        # (flow_type, flow_id) -> its Streams' names, so retention frees them without a scan
        self._by_flow: dict[tuple[str, str], set[str]] = {}

    def _get(self, key: tuple[str, str, str], capacity: int) -> _Stream:
        s = self._streams.get(key)
        if s is None:
            s = self._streams[key] = _Stream(capacity, self._token_base())
            self._by_flow.setdefault((key[0], key[2]), set()).add(key[1])
        s.capacity = capacity
        return s

    def _forget(self, key: tuple[str, str, str]) -> None:
        s = self._streams.pop(key, None)
        if s is None:
            return
        names = self._by_flow.get((key[0], key[2]))
        if names is not None:
            names.discard(key[1])
            if not names:
                del self._by_flow[(key[0], key[2])]
        # readers waiting on it look again (and find a new, empty Stream)
        for w in s.waiters:
            if not w.done():
                w.set_result(None)

    def write(self, key: tuple[str, str, str], capacity: int, value: bytes, source: str) -> None:
        s = self._get(key, capacity)
        s.seq += 1
        s.msgs.append(_Msg(seq=s.seq, value=value, created=time.time(), source=source))
        s.bytes += len(value)
        while s.bytes > s.capacity and len(s.msgs) > 1:
            s.bytes -= len(s.msgs.popleft().value)
        waiters, s.waiters = s.waiters, []
        for w in waiters:
            if not w.done():
                w.set_result(None)

    def _after(self, s: _Stream, token: int) -> _Msg | None:
        # Sequence numbers in the deque are consecutive, so the index is arithmetic: a
        # reader of a long Stream does not scan everything retained before its token.
        if not s.msgs:
            return None
        index = max(token + 1 - s.msgs[0].seq, 0)
        return s.msgs[index] if index < len(s.msgs) else None

    async def read_next(
        self, key: tuple[str, str, str], capacity: int, resume_token: str, timeout_s: float
    ) -> StreamMessageWire | None:
        found = await self.read_batch(key, capacity, resume_token, timeout_s, 1)
        return found[0] if found else None

    async def read_batch(
        self,
        key: tuple[str, str, str],
        capacity: int,
        resume_token: str,
        timeout_s: float,
        limit: int,
    ) -> list[StreamMessageWire]:
        """Up to ``limit`` retained messages after the token, oldest first; [] on timeout."""
        token = int(resume_token) if resume_token else 0
        deadline = time.monotonic() + timeout_s
        while True:
            s = self._streams.get(key)
            # a token above every number this Stream gave out comes from before a restart
            # (with the clock set back since): the reader gets everything retained
            m = self._after(s, 0 if token > s.seq else token) if s is not None else None
            if s is not None and m is not None:
                start = m.seq - s.msgs[0].seq
                return [_wire(s.msgs[i]) for i in range(start, min(start + limit, len(s.msgs)))]
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            s = self._get(key, capacity)
            fut = asyncio.get_running_loop().create_future()
            s.waiters.append(fut)
            try:
                async with asyncio.timeout(left):
                    await fut
            except TimeoutError:
                return []
            finally:
                with contextlib.suppress(ValueError):
                    s.waiters.remove(fut)
                # a Stream nobody wrote exists only for its waiting readers
                if not s.msgs and not s.waiters and self._streams.get(key) is s:
                    self._forget(key)

    def drop_flow(self, flow_type: str, flow_id: str) -> None:
        """Free the Streams of a Flow that retention deleted."""
        for name in list(self._by_flow.get((flow_type, flow_id), ())):
            self._forget((flow_type, name, flow_id))

    def stats(self) -> dict[str, int]:
        """Sizes of this process's bookkeeping: ``streams`` kept, ``waiters`` (long polls)."""
        return {
            "streams": len(self._streams),
            "waiters": sum(len(s.waiters) for s in self._streams.values()),
        }

    def list(
        self, key: tuple[str, str, str], capacity: int, page_size: int, before: str
    ) -> tuple[list[StreamMessageWire], str | None]:
        s = self._streams.get(key)
        if s is None:
            return [], None
        limit = int(before) if before else s.seq + 1
        older = [m for m in reversed(s.msgs) if m.seq < limit]
        page = older[:page_size]
        nxt = str(page[-1].seq) if len(older) > page_size and page else None
        return [_wire(m) for m in page], nxt

    async def list_page(
        self, key: tuple[str, str, str], capacity: int, page_size: int, before: str
    ) -> tuple[builtins.list[StreamMessageWire], str | None]:
        """:meth:`list` with the interface of the store-backed Streams (servers sharing one)."""
        return self.list(key, capacity, page_size, before)

    def wake(self, name: str) -> None:
        """Streams in memory wake their readers on write; nothing to do."""
