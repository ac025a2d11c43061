"""The Dex server inside the application's own process, with in-process Workers.

    async with EmbeddedServer(database_path="app.sqlite3") as server:
        worker = dex.AsyncWorker(registry, options=dex.WorkerOptions(
            server_address=server.worker_address))   # "inproc://dex"
        ...  # clients, dexcli and Dex Web use server.address ("127.0.0.1:PORT")

The server (the Runtime, the store, the HTTP API and Dex Web) runs on the caller's event
loop. Workers of the same process that use :attr:`EmbeddedServer.worker_address` reach it
through an in-memory link (the SDK's ``dex._worker._inproc``) instead of a WebSocket: the
same frames, through one asyncio queue per direction, handled by the same Worker endpoint
as ``/v1/worker``. Nothing else changes: commits, limits, batching, resume after a
reconnect, heartbeats, cancellation. Workers in other processes still connect over
``/v1/worker`` on :attr:`EmbeddedServer.address`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType

from dex._protocol import ErrorCode, RegisterRejected, encoder
from dex._worker import _inproc
from dex._worker._inproc import InProcessEndpoint, LinkClosedError, LinkEnd
from starlette.types import Message
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from dex_server.api._routes import bearer_token_matches
from dex_server.api._worker import worker_endpoint
from dex_server.app import (
    ServerConfig,
    _Server,
    build_app,
    prepared_store,
    uvicorn_server,
)

__all__ = ["EmbeddedServer"]

log = logging.getLogger("dex_server.embedded")

_CLOSE_TIMEOUT_S = 10.0


class _EmbeddedUvicorn(_Server):
    """The server without signal handlers: the embedding application owns its signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class EmbeddedServer:
    """Run a Dex server in this process, for Workers of this process and local clients.

    When to use it: an application that wants durable Flows without running a separate
    server process (a desktop or single-host app, a test, a script). The guarantees are
    those of a separate server: a Step's result commits with its state before the Flow
    moves on, and a crash repeats at most the Step attempt that was running. A crash of the
    process takes the server and its Workers down together; starting it again on the same
    database resumes every Flow from the store. For several hosts, or Workers that must
    outlive the application, run ``dexcli server`` instead.

    Args:
        database_path: the SQLite file (created when missing). Exactly one of it and
            ``database_url`` (or ``config``) is given.
        database_url: a ``postgresql://`` URL instead of a SQLite file.
        host: interface of the HTTP API and Dex Web (default loopback).
        port: TCP port; ``0`` (the default) picks a free one (see :attr:`address`).
        name: the in-process name; Workers use ``inproc://<name>`` (default ``"dex"``).
            Each embedded server of a process needs its own.
        token: bearer token the HTTP API requires, and the in-process Workers' credential
            must match; ``None`` (the default) disables auth.
        web: serve Dex Web at ``/ui`` (default ``True``).
        config: a full :class:`~dex_server.app.ServerConfig` instead of the arguments
            above (``name`` still applies).

    Use ``async with EmbeddedServer(...) as server`` (or ``await start()`` and ``await
    close()``) from the event loop that should run it; the server's work runs on that
    loop, so handlers of in-process ``AsyncWorker`` s must not block it (sync handlers run
    on the Worker's threads). A sync ``Worker`` on its own thread may use the in-process
    address too. Signals stay the application's: the server installs no handlers.

    Closing stops the server the way a shutdown of a separate one does: in-process Workers
    see their connection close and retry (and resume their running tasks if a server of
    the same name starts again within its reconnect grace period); HTTP clients and
    remote Workers are disconnected; the store commits what it holds and closes.

    Raises:
        ValueError: the arguments contradict each other (see :class:`ServerConfig`).

    """

    def __init__(
        self,
        database_path: str | Path | None = None,
        *,
        database_url: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "dex",
        token: str | None = None,
        web: bool = True,
        config: ServerConfig | None = None,
    ) -> None:
        if config is None:
            config = ServerConfig(
                database_path=Path(database_path) if database_path is not None else None,
                database_url=database_url,
                host=host,
                port=port,
                token=token,
                web=web,
            )
        elif database_path is not None or database_url is not None:
            raise ValueError("give either config or database_path / database_url, not both")
        if not name or "/" in name:
            raise ValueError(f"name must be non-empty and without '/': {name!r}")
        self.config = config
        self.name = name
        self._address = ""
        self._stack: AsyncExitStack | None = None
        self._server: _Server | None = None
        self._serving: asyncio.Task[None] | None = None
        self._endpoint: InProcessEndpoint | None = None
        self._links: dict[LinkEnd, asyncio.Task[None]] = {}
        self._handle: Callable[[WebSocket], Awaitable[None]] | None = None
        self._closed = False

    @property
    def address(self) -> str:
        """``host:port`` of the HTTP API and Dex Web (clients, ``dexcli --server``).

        Raises:
            RuntimeError: the server is not started.

        """
        if not self._address:
            raise RuntimeError("the EmbeddedServer is not started")
        return self._address

    @property
    def worker_address(self) -> str:
        """The ``server_address`` for Workers of this process: ``inproc://<name>``."""
        return f"{_inproc.SCHEME}{self.name}"

    async def __aenter__(self) -> EmbeddedServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Open the store, listen for HTTP and accept in-process Workers; returns when ready.

        Raises:
            RuntimeError: started before, or the server stopped during startup (its log
                says why).
            ValueError: another embedded server of this process has the same ``name``.
            DataFolderInUseError: another server uses the SQLite store's data folder.
            StoreUnavailableError: the PostgreSQL database cannot be reached.
            StoreNotWritableError: the SQLite store cannot be opened or written.
            SchemaBehindError: ``verify_schema_only`` and the schema is behind.
            OSError: the HTTP address cannot be bound.

        """
        if self._stack is not None or self._closed:
            raise RuntimeError("an EmbeddedServer can be started only once")
        loop = asyncio.get_running_loop()
        if _inproc.is_registered(self.name):  # before opening anything
            raise ValueError(
                f"an embedded Dex server named {self.worker_address} already runs in this"
                " process; give the second one another name"
            )
        self._stack = stack = AsyncExitStack()
        try:
            app = build_app(self.config)
            self._handle = worker_endpoint(app.state.runtime)
            await stack.enter_async_context(prepared_store(self.config, app))
            ready = asyncio.Event()
            server, listeners = uvicorn_server(self.config, app, [ready], _EmbeddedUvicorn)
            stack.callback(listeners.close)
            self._server = server
            self._serving = serving = asyncio.create_task(
                server.serve(sockets=listeners.sockets), name="dex-embedded-server"
            )
            waiter = asyncio.create_task(ready.wait())
            await asyncio.wait({serving, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if not ready.is_set():
                await serving  # raises what stopped it, if anything did
                raise RuntimeError("the embedded Dex server stopped during startup")
            self._address = server.address
            self._endpoint = InProcessEndpoint(
                http_address=server.address,
                loop=loop,
                accept=self._accept,
                # as the WebSocket's limit: beyond the announced one, so a frame slightly
                # over it gets an answer, not a close
                max_message_bytes=self.config.max_worker_frame_bytes + 1024 * 1024,
            )
            _inproc.register_endpoint(self.name, self._endpoint)
        except BaseException:
            await self._shutdown()
            raise
        log.info("embedded Dex server %s listening on %s", self.worker_address, self._address)

    async def close(self) -> None:
        """Disconnect the Workers, stop the server and close the store.

        Safe to call more than once and before ``start()``; the server cannot be started
        again (create a new one on the same database to restart).
        """
        self._closed = True
        await self._shutdown()

    async def _shutdown(self) -> None:
        if self._endpoint is not None:
            _inproc.unregister_endpoint(self.name, self._endpoint)
            self._endpoint = None
        # like the WebSockets of a stopping server: closed with 1012 (service restart)
        for end in list(self._links):
            end.close(_inproc.CLOSE_SERVICE_RESTART, "server shutting down")
        if self._links:
            await asyncio.wait(list(self._links.values()), timeout=_CLOSE_TIMEOUT_S)
        server, serving = self._server, self._serving
        self._server = self._serving = None
        if server is not None and serving is not None:
            server.should_exit = True
            with contextlib.suppress(Exception):
                await serving
        stack, self._stack = self._stack, AsyncExitStack()  # a later start() still refuses
        if stack is not None:
            await stack.aclose()
        if self._address and self.config.address_file is not None:
            # nobody listens there any more: no stale address left behind (as dexcli dev)
            self.config.address_file.unlink(missing_ok=True)

    # ------------------------------------------------------------------ in-process links

    def _accept(self, end: LinkEnd, headers: dict[str, str]) -> None:
        """A Worker of this process opened a link: serve it like a ``/v1/worker`` socket."""
        if self._endpoint is None:  # closing meanwhile
            end.close(_inproc.CLOSE_SERVICE_RESTART, "server shutting down")
            return
        task = asyncio.get_running_loop().create_task(
            self._serve_link(end, headers), name="dex-embedded-worker-link"
        )
        self._links[end] = task
        task.add_done_callback(lambda _: self._links.pop(end, None))

    async def _serve_link(self, end: LinkEnd, headers: dict[str, str]) -> None:
        try:
            if not self._authorized(headers):
                rejected = RegisterRejected(
                    code=ErrorCode.UNAUTHENTICATED,
                    message="missing or wrong bearer token for the embedded server",
                )
                with contextlib.suppress(LinkClosedError):
                    end.send(encoder.encode(rejected).decode())
                return
            assert self._handle is not None
            await self._handle(_LinkWebSocket(end))
        except Exception:  # a bug, not the Worker's doing: it reconnects
            log.exception("the in-process Worker link failed")
            end.close(1011, "internal error")
        finally:
            end.close(_inproc.CLOSE_NORMAL, "")

    def _authorized(self, headers: dict[str, str]) -> bool:
        # the check of the HTTP API and of /v1/worker
        token = self.config.token
        if not token:
            return True
        return bearer_token_matches(headers.get("Authorization", "").encode(), token.encode())


class _LinkWebSocket(WebSocket):
    """Starlette's WebSocket, as the Worker endpoint uses it, over a link's server end.

    It keeps the socket's contract (a disconnect message, ``WebSocketDisconnect`` on a
    closed link) without the ASGI message round trip per frame.
    """

    def __init__(self, end: LinkEnd) -> None:
        scope = {"type": "websocket", "path": "/v1/worker", "headers": [], "query_string": b""}
        super().__init__(scope, _no_asgi_receive, _no_asgi_send)
        self._end = end
        self._first = True

    async def accept(
        self,
        subprotocol: str | None = None,
        headers: Iterable[tuple[bytes, bytes]] | None = None,
    ) -> None:
        self.client_state = self.application_state = WebSocketState.CONNECTED

    async def receive(self) -> Message:
        try:
            data = await self._end.recv()
        except LinkClosedError as exc:
            self.client_state = WebSocketState.DISCONNECTED
            return {"type": "websocket.disconnect", "code": exc.code, "reason": exc.reason}
        if self._first or isinstance(data, str):  # the register frame is read as text
            self._first = False
            text = data if isinstance(data, str) else data.decode("utf-8", "replace")
            return {"type": "websocket.receive", "text": text}
        # the Worker sends encoded JSON; the endpoint decodes bytes as well as text
        return {"type": "websocket.receive", "bytes": data}

    async def receive_text(self) -> str:
        message = await self.receive()
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message["code"], message.get("reason"))
        return str(message["text"])

    async def send_text(self, data: str) -> None:
        self._push(data)

    async def send_bytes(self, data: bytes) -> None:
        self._push(data)

    async def send(self, message: Message) -> None:
        # what the other send_* methods of the base class go through
        if message["type"] == "websocket.send":
            text = message.get("text")
            self._push(text if text is not None else message["bytes"])
        elif message["type"] == "websocket.close":
            await self.close(message.get("code", 1000), message.get("reason"))

    def _push(self, data: str | bytes) -> None:
        try:
            self._end.send(data)
        except LinkClosedError:  # as a socket that went away
            self.application_state = WebSocketState.DISCONNECTED
            raise WebSocketDisconnect(code=1006) from None

    async def close(self, code: int = 1000, reason: str | None = None) -> None:
        self.application_state = WebSocketState.DISCONNECTED
        self._end.close(code, reason or "")


async def _no_asgi_receive() -> Message:
    raise RuntimeError("an in-process link has no ASGI receive channel")


async def _no_asgi_send(message: Message) -> None:
    raise RuntimeError("an in-process link has no ASGI send channel")
