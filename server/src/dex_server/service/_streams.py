"""Streams kept in the store, for servers that share it.

A Stream's writer (a Worker, or a client) and its readers may be connected to different
servers, so messages go to the store (trimmed to the declared capacity, oldest first) and
a signal wakes the readers of every server; readers also poll, so a lost signal only
delays a message. Unlike the in-memory Streams of a one-server store, these survive a
server restart; they are deleted with their Flow after retention.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import msgspec
from dex._protocol import StreamMessageWire

from dex_server.store import Store, Tx
from dex_server.store._contract import StreamRow

log = logging.getLogger("dex_server.streams")
_POLL_S = 1.0
StreamKey = tuple[str, str, str]


def _wire(row: StreamRow) -> StreamMessageWire:
    seq, created, source, value = row
    return StreamMessageWire(
        value=msgspec.Raw(value), resume_token=str(seq), created_time=created, source=source
    )


def _name(key: StreamKey) -> str:
    return "\t".join(key)


class StoreStreams:
    """The Streams of every server sharing one store (same interface as ``StreamHub``)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}

    def write(
        self, key: StreamKey, capacity: int, value: bytes, source: str
    ) -> asyncio.Future[None]:
        """Queue the append; the returned future resolves once it committed."""
        name = _name(key)

        def job(tx: Tx) -> None:
            tx.streams.append(key, source, value, time.time(), capacity)
            tx.signals.notify("stream", name)

        def done(fut: asyncio.Future[None]) -> None:
            if not fut.cancelled() and fut.exception() is not None:
                log.warning("a Stream write failed (best effort)", exc_info=fut.exception())
                return
            self.wake(name)

        fut = self.store.submit(job)
        fut.add_done_callback(done)
        return fut

    def wake(self, name: str) -> None:
        for w in self._waiters.pop(name, []):
            if not w.done():
                w.set_result(None)

    async def read_next(
        self, key: StreamKey, capacity: int, resume_token: str, timeout_s: float
    ) -> StreamMessageWire | None:
        found = await self.read_batch(key, capacity, resume_token, timeout_s, 1)
        return found[0] if found else None

    async def read_batch(
        self, key: StreamKey, capacity: int, resume_token: str, timeout_s: float, limit: int
    ) -> list[StreamMessageWire]:
        """Up to ``limit`` retained messages after the token, oldest first; [] on timeout."""
        token = int(resume_token) if resume_token else 0
        deadline = time.monotonic() + timeout_s
        name = _name(key)
        while True:
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(name, []).append(fut)
            try:
                rows = await self.store.read(lambda tx: tx.streams.after(key, token, limit))
                if rows:
                    return [_wire(r) for r in rows]
                left = deadline - time.monotonic()
                if left <= 0:
                    return []
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(left, _POLL_S)):
                        await fut
            finally:
                # a read that ends (found, timed out, cancelled) leaves nothing behind
                self._unwait(name, fut)

    def _unwait(self, name: str, fut: asyncio.Future[None]) -> None:
        waiters = self._waiters.get(name)
        if waiters is None:
            return
        with contextlib.suppress(ValueError):
            waiters.remove(fut)
        if not waiters:
            del self._waiters[name]

    def drop_flow(self, flow_type: str, flow_id: str) -> None:
        """Retention deleted the Flow's messages in the store itself: nothing to free."""

    def stats(self) -> dict[str, int]:
        """Sizes of this process's bookkeeping: ``waiters`` (long polls in progress)."""
        return {"waiters": sum(len(w) for w in self._waiters.values())}

    async def list_page(
        self, key: StreamKey, capacity: int, page_size: int, before: str
    ) -> tuple[list[StreamMessageWire], str | None]:
        seq = int(before) if before else None
        rows = await self.store.read(lambda tx: tx.streams.before(key, seq, page_size + 1))
        page = rows[:page_size]
        nxt = str(page[-1][0]) if len(rows) > page_size and page else None
        return [_wire(r) for r in page], nxt
