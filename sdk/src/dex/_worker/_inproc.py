"""In-process links: a Worker and an embedded server in one process, no socket between them.

An embedded server (``dex_server.embedded.EmbeddedServer``) registers an
:class:`InProcessEndpoint` under a name in this module's process-local registry; a Worker
whose ``server_address`` is ``inproc://<name>`` opens a :class:`Link` to it instead of a
WebSocket. The link carries the very messages the WebSocket would (the same encoded
protocol frames), passed as objects through one asyncio queue per direction, so every
protocol behaviour stays the same: registration, batching, resume after a reconnect,
heartbeats, cancellation, the frame size limits.

The SDK does not depend on the server: the server adapts its end of a link to the
interface its WebSocket endpoint expects.

Each end belongs to the event loop that reads it. Both ends on one loop is the usual case
(an ``AsyncWorker`` next to the server); a sync ``Worker`` runs its own loop on a thread,
and a message to an end on another loop is handed over with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from types import TracebackType

from websockets.exceptions import ConnectionClosed
from websockets.frames import Close

from dex.errors import InProcessServerNotFoundError

__all__ = [
    "SCHEME",
    "InProcessEndpoint",
    "Link",
    "LinkEnd",
    "WorkerLink",
    "endpoint",
    "is_inproc",
    "is_registered",
    "register_endpoint",
    "unregister_endpoint",
]

SCHEME = "inproc://"

# close codes, as a WebSocket would use them
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_TOO_BIG = 1009
CLOSE_SERVICE_RESTART = 1012


@dataclass(frozen=True)
class InProcessEndpoint:
    """What an embedded server registers: where its HTTP API listens and how to link up.

    Attributes:
        http_address: ``host:port`` of the server's HTTP API (the Worker fetches large
            values from it, as over a WebSocket connection).
        loop: the event loop the server runs on.
        accept: called on ``loop`` with the server's end of a new link and the Worker's
            request headers (its ``Authorization``), once per connection.
        max_message_bytes: the largest message the server accepts from a Worker (a larger
            one closes the link with code 1009, as the WebSocket would).

    """

    http_address: str
    loop: asyncio.AbstractEventLoop
    accept: Callable[[LinkEnd, dict[str, str]], None]
    max_message_bytes: int


_lock = threading.Lock()
_endpoints: dict[str, InProcessEndpoint] = {}


def is_inproc(address: str) -> bool:
    """Whether ``address`` names an embedded server of this process (``inproc://name``)."""
    return address.strip().startswith(SCHEME)


def _name(address: str) -> str:
    return address.strip().removeprefix(SCHEME).rstrip("/")


def register_endpoint(name: str, endpoint: InProcessEndpoint) -> None:
    """Register ``endpoint`` as ``inproc://<name>``.

    Raises:
        ValueError: the name is empty, has a ``/``, or another embedded server holds it.

    """
    if not name or "/" in name:
        raise ValueError(f"an in-process server name must be non-empty without '/': {name!r}")
    with _lock:
        if name in _endpoints:
            raise ValueError(
                f"an embedded Dex server named {SCHEME}{name} already runs in this process; "
                "give the second one another name"
            )
        _endpoints[name] = endpoint


def unregister_endpoint(name: str, endpoint: InProcessEndpoint) -> None:
    """Remove ``endpoint`` (only if it still holds ``name``); new links to it then fail."""
    with _lock:
        if _endpoints.get(name) is endpoint:
            del _endpoints[name]


def is_registered(name: str) -> bool:
    """Whether an embedded server of this process holds ``inproc://<name>``."""
    with _lock:
        return name in _endpoints


def endpoint(address: str) -> InProcessEndpoint:
    """The endpoint registered for ``inproc://<name>``.

    Raises:
        InProcessServerNotFoundError: none is registered under that name.

    """
    with _lock:
        found = _endpoints.get(_name(address))
        known = sorted(_endpoints)
    if found is None:
        raise InProcessServerNotFoundError(address.strip(), [f"{SCHEME}{n}" for n in known])
    return found


class _Closed:
    """The last item of an inbox: the link closed with this code."""

    __slots__ = ("code", "reason")

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason


Message = str | bytes


class LinkEnd:
    """One side of a :class:`Link`: send to the other side, receive what it sent.

    Use it only from the event loop it was made for (``loop``).
    """

    def __init__(self, link: Link, loop: asyncio.AbstractEventLoop, max_size: int) -> None:
        self._link = link
        self.loop = loop
        self.max_size = max_size  # largest message this end accepts
        # a deque and one waiter: lighter than an asyncio.Queue on every message
        self._inbox: deque[Message | _Closed] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self.peer: LinkEnd = self

    @property
    def closed(self) -> _Closed | None:
        """How the link closed (None while it is open)."""
        return self._link.closed

    def send(self, message: Message) -> None:
        """Queue ``message`` for the other side.

        A message larger than the other side accepts closes the link (code 1009), as a
        WebSocket does; the call itself returns.

        Raises:
            LinkClosedError: the link is closed.

        """
        link = self._link
        if link.closed is not None:
            raise LinkClosedError(link.closed)
        peer = self.peer
        if len(message) > peer.max_size:
            link.close(CLOSE_TOO_BIG, "message too big")
        elif link.one_loop:
            peer._deliver(message)
        else:
            peer._deliver_threadsafe(message)

    async def recv(self) -> Message:
        """The next message from the other side.

        Raises:
            LinkClosedError: the link closed (after every message sent before was read).

        """
        inbox = self._inbox
        while not inbox:
            waiter = self._waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        item = inbox[0]
        if isinstance(item, _Closed):  # left in place: every later call sees it too
            raise LinkClosedError(item)
        inbox.popleft()
        return item

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Close the link for both sides; messages queued before still arrive."""
        self._link.close(code, reason)

    def _deliver(self, item: Message | _Closed) -> None:
        """Queue ``item`` (called on this end's loop)."""
        self._inbox.append(item)
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _deliver_threadsafe(self, item: Message | _Closed) -> None:
        if not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(self._deliver, item)


class LinkClosedError(Exception):
    """The link closed; ``code`` and ``reason`` say how."""

    def __init__(self, closed: _Closed) -> None:
        super().__init__(f"in-process link closed ({closed.code} {closed.reason})".strip())
        self.code = closed.code
        self.reason = closed.reason


class Link:
    """A pair of connected ends, one for the Worker and one for the server."""

    def __init__(
        self,
        worker_loop: asyncio.AbstractEventLoop,
        server_loop: asyncio.AbstractEventLoop,
        *,
        worker_max_size: int,
        server_max_size: int,
    ) -> None:
        self.closed: _Closed | None = None
        self.one_loop = worker_loop is server_loop
        self._lock = threading.Lock()
        self.worker = LinkEnd(self, worker_loop, worker_max_size)
        self.server = LinkEnd(self, server_loop, server_max_size)
        self.worker.peer = self.server
        self.server.peer = self.worker

    def close(self, code: int, reason: str) -> None:
        """Close both directions once; each end reads what was queued, then the close."""
        with self._lock:
            if self.closed is not None:
                return
            closed = self.closed = _Closed(code, reason)
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for end in (self.worker, self.server):
            if end.loop is running:
                end._deliver(closed)
            else:
                end._deliver_threadsafe(closed)


class WorkerLink:
    """The Worker's end of a link, with the calls its session makes on a WebSocket.

    ``send``, ``recv``, iteration and ``close`` behave like those of a websockets client
    connection, and a closed link raises ``ConnectionClosed`` the way a closed WebSocket
    does, so the session serves on either without knowing which.
    """

    def __init__(self, end: LinkEnd) -> None:
        self._end = end

    async def send(self, message: Message, text: bool | None = None) -> None:
        try:
            self._end.send(message)
        except LinkClosedError as exc:
            raise _connection_closed(exc) from None

    async def recv(self) -> Message:
        try:
            return await self._end.recv()
        except LinkClosedError as exc:
            raise _connection_closed(exc) from None

    async def __aiter__(self) -> AsyncIterator[Message]:
        while True:
            try:
                message = await self._end.recv()
            except LinkClosedError as exc:
                if exc.code in (CLOSE_NORMAL, CLOSE_GOING_AWAY):
                    return
                raise _connection_closed(exc) from None
            yield message

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        self._end.close(code, reason)

    async def __aenter__(self) -> WorkerLink:
        return self

    async def __aexit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._end.close(CLOSE_NORMAL, "")


def _connection_closed(exc: LinkClosedError) -> ConnectionClosed:
    return ConnectionClosed(Close(exc.code, exc.reason), None)


def connect(address: str, headers: dict[str, str], *, max_size: int) -> WorkerLink:
    """Open a link to the embedded server at ``inproc://<name>`` from the running loop.

    ``max_size`` bounds the messages the Worker accepts (as the WebSocket client's
    ``max_size``); the server's bound is its own.

    Raises:
        InProcessServerNotFoundError: no embedded server of that name runs in the process.

    """
    target = endpoint(address)
    loop = asyncio.get_running_loop()
    link = Link(
        loop, target.loop, worker_max_size=max_size, server_max_size=target.max_message_bytes
    )
    if target.loop is loop:
        target.accept(link.server, headers)
    else:
        target.loop.call_soon_threadsafe(target.accept, link.server, headers)
    return WorkerLink(link.worker)
