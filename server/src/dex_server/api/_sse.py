"""Server-Sent Events: a Flow's Streams and a run's history, pushed over plain HTTP.

Two feeds, both ``text/event-stream``:

- a Stream: one ``message`` event per Stream message, its ``id:`` the message's resume
  token (the sequence number ``next`` and ``list`` hand out);
- a run's history: one ``history`` event per history event, its ``id:`` the event ID.

A client resumes where it stopped by sending the last ``id:`` it saw as the
``Last-Event-ID`` header (browsers' ``EventSource`` does so by itself when it reconnects)
or, for a first connection, as the ``after`` query parameter; the header wins. Idle
connections get a comment line every ``sse_heartbeat_s`` so proxies keep them open. When
the Flow closes, the feed sends what is left, then one ``end`` event with the Flow's
status, and ends. Each connection holds one message (or one history page) at a time and
writes it only as fast as the client reads, so its memory is bounded; the number of open
connections is capped by ``max_sse_connections``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping

from dex._protocol import ErrorCode, HistoryPage, StreamMessageWire, encoder
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from dex_server.service import Runtime, _flows
from dex_server.service._common import ServiceError
from dex_server.store import Tx

log = logging.getLogger("dex_server.sse")
MEDIA_TYPE = "text/event-stream"
# Browsers wait this long (ms) before reconnecting a dropped EventSource.
RETRY_MS = 2000
# History events read per store read.
HISTORY_PAGE = 100
# With a shared store, other servers' commits may arrive without a signal: look this often.
SHARED_POLL_S = 2.0
# A feed woken by a change waits this long before reading, so a burst costs one read.
COALESCE_S = 0.1

# A feed yields encoded events, or None when it has been idle for a heartbeat period.
Feed = AsyncIterator[bytes | None]


class SseSlots:
    """The open Server-Sent Events connections of one server, against their limit.

    Args:
        limit: ``max_sse_connections``.

    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.closing = asyncio.Event()

    def take(self) -> None:
        """Count one more connection.

        Raises:
            ServiceError: ``UNAVAILABLE`` when ``limit`` connections are open already.

        """
        if self.open >= self.limit:
            raise ServiceError(
                ErrorCode.UNAVAILABLE,
                f"too many Server-Sent Events connections: {self.open} are open, the limit"
                f" max_sse_connections={self.limit}",
            )
        self.open += 1

    def give(self) -> None:
        """Count one connection less."""
        self.open -= 1

    def close_all(self) -> None:
        """End every open feed and long poll (the server is stopping); later ones are refused."""
        self.closing.set()
        self.limit = 0


def slots_of(runtime: Runtime) -> SseSlots:
    """The server's :class:`SseSlots`, made on first use."""
    slots: SseSlots | None = getattr(runtime, "_sse_slots", None)
    if slots is None:
        slots = SseSlots(runtime.config.max_sse_connections)
        runtime._sse_slots = slots  # type: ignore[attr-defined]
    return slots


def event(data: bytes, *, id_: str | None = None, name: str | None = None) -> bytes:
    """One SSE event; ``data`` on as many ``data:`` lines as it has lines."""
    head = b""
    if id_ is not None:
        head += b"id: " + id_.encode() + b"\n"
    if name is not None:
        head += b"event: " + name.encode() + b"\n"
    lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def resume_point(request: Request) -> int | None:
    """Where a feed resumes: ``Last-Event-ID``, else ``after``; None when neither is given.

    Raises:
        ServiceError: ``BAD_REQUEST`` when the value is not a decimal event ID.

    """
    raw = request.headers.get("last-event-id")
    name = "Last-Event-ID"
    if raw is None or raw == "":
        raw, name = request.query_params.get("after", ""), "after"
    if raw == "":
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
        raise ServiceError(ErrorCode.BAD_REQUEST, f"bad {name} {raw[:40]!r}: not an event ID")
    return int(raw)


class SseResponse(Response):
    """A response that sends ``feed`` as ``text/event-stream`` until it ends.

    It gives its slot back however it ends: feed done, client gone, or server stopping.
    """

    def __init__(
        self,
        feed: Feed,
        slots: SseSlots,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(media_type=MEDIA_TYPE)
        self.feed = feed
        self.slots = slots
        self.extra_headers = dict(headers or {})

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            headers = {
                "content-type": f"{MEDIA_TYPE}; charset=utf-8",
                "cache-control": "no-store",
                # nginx and similar proxies: pass events on at once
                "x-accel-buffering": "no",
                **self.extra_headers,
            }
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(k.encode(), v.encode()) for k, v in headers.items()]
                    # headers added to the response after it was made (a session cookie)
                    + [
                        (k, v)
                        for k, v in self.raw_headers
                        if k not in (b"content-length", b"content-type")
                    ],
                }
            )
            pump = asyncio.ensure_future(self._pump(send))
            watch = asyncio.ensure_future(_until_disconnect(receive))
            stop = asyncio.ensure_future(self.slots.closing.wait())
            tasks = (pump, watch, stop)
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for t in tasks:
                    t.cancel()
                for t in tasks:
                    try:
                        await t
                    except (asyncio.CancelledError, OSError):
                        pass  # cancelled here, or the client's connection is gone
                    except Exception:
                        log.warning("a Server-Sent Events feed failed", exc_info=True)
            if not watch.done() or watch.cancelled():
                with contextlib.suppress(OSError):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            self.slots.give()
            await _aclose(self.feed)

    async def _pump(self, send: Send) -> None:
        await send(
            {
                "type": "http.response.body",
                "body": f"retry: {RETRY_MS}\n\n".encode(),
                "more_body": True,
            }
        )
        async for chunk in self.feed:
            body = chunk if chunk is not None else b": keep-alive\n\n"
            await send({"type": "http.response.body", "body": body, "more_body": True})


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def _aclose(feed: Feed) -> None:
    close = getattr(feed, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()


async def _wait_closed(runtime: Runtime, flow_id: str) -> None:
    """Return once the Flow is no longer running."""
    if not runtime.shared:
        while not await runtime.wait_closed(flow_id, 3600.0):
            pass
        return
    # another server may close it: its signal bumps the change count, polling backs it up
    while True:
        seen = runtime.changes.count
        info = await runtime.store.read(lambda tx: _flows.describe(tx, flow_id))
        if info.status != "running":
            return
        await runtime.changes.wait(seen, SHARED_POLL_S)


async def _status(runtime: Runtime, flow_id: str) -> bytes:
    info = await runtime.store.read(lambda tx: _flows.describe(tx, flow_id))
    return encoder.encode({"flow_id": info.flow_id, "run_id": info.run_id, "status": info.status})


async def stream_feed(
    runtime: Runtime,
    key: tuple[str, str, str],
    capacity: int,
    after: int,
    heartbeat_s: float,
    lifetime_s: float,
) -> Feed:
    """The events of one Stream after resume token ``after`` (0: from its oldest message).

    It ends after ``end`` once the Flow closed, or silently after ``lifetime_s`` (the
    client reconnects with ``Last-Event-ID`` and loses nothing).
    """
    flow_id = key[2]
    deadline = time.monotonic() + lifetime_s
    token = str(after) if after else ""
    closed = asyncio.ensure_future(_wait_closed(runtime, flow_id))
    read: asyncio.Future[StreamMessageWire | None] | None = None
    try:
        while True:
            left = deadline - time.monotonic()
            read = asyncio.ensure_future(
                runtime.streams.read_next(key, capacity, token, max(0.0, min(heartbeat_s, left)))
            )
            await asyncio.wait({read, closed}, return_when=asyncio.FIRST_COMPLETED)
            if not read.done():
                # the Flow closed: send what was written before, then say so
                read.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await read
                while (msg := await runtime.streams.read_next(key, capacity, token, 0)) is not None:
                    token = msg.resume_token
                    yield event(encoder.encode(msg), id_=token, name="message")
                yield event(await _status(runtime, flow_id), name="end")
                return
            msg = read.result()
            if msg is None:
                if left <= 0:
                    return
                yield None
                continue
            token = msg.resume_token
            yield event(encoder.encode(msg), id_=token, name="message")
    finally:
        for t in (read, closed):
            if t is not None and not t.done():
                t.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t


async def history_feed(
    runtime: Runtime,
    flow_id: str,
    run_id: str,
    after: int,
    heartbeat_s: float,
    lifetime_s: float,
) -> Feed:
    """The history events of run ``run_id`` after event ``after``, as they commit.

    Ends like :func:`stream_feed`.
    """
    poll = min(heartbeat_s, SHARED_POLL_S) if runtime.shared else heartbeat_s
    last_sent = time.monotonic()
    deadline = last_sent + lifetime_s
    changes = runtime.changes
    with changes.watching(run_id):
        while True:
            seen = changes.mark(run_id)

            def job(tx: Tx, after: int = after) -> tuple[HistoryPage, str]:
                page = _flows.history_page(tx, flow_id, run_id, HISTORY_PAGE, str(after))
                flow = tx.flows.get(run_id)
                return page, flow.status if flow is not None else "deleted"

            page, status = await runtime.store.read(job)
            for e in page.events:
                after = e.event_id
                yield event(encoder.encode(e), id_=str(after), name="history")
                last_sent = time.monotonic()
            if page.next_page_token is not None:
                continue
            if status != "running":
                yield event(
                    encoder.encode({"flow_id": flow_id, "run_id": run_id, "status": status}),
                    name="end",
                )
                return
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                if await changes.wait_run(run_id, seen, min(poll, left)):
                    await asyncio.sleep(COALESCE_S)  # a burst of commits: one read
                    break
                if time.monotonic() - last_sent >= heartbeat_s - 0.01:
                    yield None
                    last_sent = time.monotonic()
                if runtime.shared:
                    break  # look anyway: another server may have committed silently
