"""``AsyncWorker``: connect, register, run tasks, reconnect, drain on stop."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import Any, cast

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidStatus, WebSocketException

from dex._blob_cache import BlobCache
from dex._credential import resolve_token
from dex._env import unix_socket_path
from dex._invoke import TaskIO, invoke
from dex._protocol import Register, RetryPolicySpec, Task, TaskResult
from dex._registry import Registry
from dex._transport import HttpTransport, auth_headers, ws_url
from dex._worker import _inproc
from dex._worker._blobs import BlobResolver
from dex._worker._logs import install_default_handler
from dex._worker._options import DEFAULT_ASYNC_TASK_SLOTS, WorkerOptions, WorkerTarget
from dex._worker._registration import PullQueueRegistrationState, PullRegistrationState
from dex._worker._session import DirectConnection, RegistrationRejectedError, Session
from dex._worker._stats import WorkerStats
from dex.errors import PullRegistrationError

log = logging.getLogger("dex.worker")

_BACKOFF_MIN_S = 0.1
_BACKOFF_MAX_S = 5.0
_PERMANENT_BACKOFF_S = 60.0
_REGISTER_TIMEOUT_S = 10.0
_MAX_FRAME_BYTES = 256 * 1024 * 1024
_PERMANENT_CODES = frozenset({"UNAUTHENTICATED", "BAD_REQUEST"})


_PULL_TARGET = WorkerTarget(pull=True)
_TOKEN_HINT = (
    ": missing or wrong bearer token; pass it as WorkerOptions(credential=...)"
    " (a token string, FileCredential or ApiKeyCredential) or set env DEX_TOKEN"
)


class _CredentialError(Exception):
    """The Worker's credential raised (the cause) while connecting."""


@cache
def _sdk_version() -> str:
    try:
        return version("dex-sdk")
    except PackageNotFoundError:
        return "0"


class AsyncWorker:
    """Runs the Step and RPC handlers of a Registry's Flows for the server (asyncio).

    Args:
        registry: the ``Registry`` whose Flow types this Worker serves.
        blob_cache: a ``BlobCache`` for large values (``open_blob_cache(...)`` or any
            object with its methods); None keeps recent blobs in memory only.
        options: server address, task slots, drain timeout, credential; None →
            ``WorkerOptions()``.

    Task slots: ``PullWorkerOptions.max_concurrent_tasks`` handlers at once (default 100),
    of which ``reserved_rpc_tasks`` (default 1) only RPCs use. Sync handlers run on a
    thread pool with one thread per slot (threads start on demand).

    ``await worker.start()`` runs until ``await worker.stop()`` (or use ``await
    worker.run()``, which also stops gracefully on SIGTERM/SIGINT). The Worker holds one
    WebSocket to the server, reconnecting with backoff (0.1 s doubling to 5 s; 60 s after
    the server rejects its credentials or registration). Sync handlers run in threads,
    async handlers on this loop: they must not block it.

    A dropped connection does not stop running handlers: their heartbeats, Stream writes
    and results wait, and the Worker asks the server to resume those tasks when it
    reconnects (within the server's ``worker_reconnect_grace_s``, default 5 s, on the same
    server). Tasks the server no longer holds for it are cancelled then, and all of them
    are if no reconnect succeeds within that grace period.

    Same machine: with ``server_address="unix:///PATH"`` the Worker connects to a server
    listening on that Unix socket (``--unix-socket PATH``) instead of over TCP: the same
    WebSocket and HTTP requests, about half the kernel work of a loopback TCP connection
    per message.

    In-process: with ``server_address="inproc://<name>"`` the Worker links to the embedded
    server of that name in this process (``dex_server.embedded.EmbeddedServer``) through
    in-memory queues instead of a WebSocket; the frames and every behaviour above are the
    same.

    Start a Worker once; it is not reusable after ``stop()``. ``async with
    AsyncWorker(...) as worker:`` closes it on exit (``close()``: stop, drain, wait).

    Logging: logger ``dex.worker`` tells where it connected, the Flow types it serves and
    its task slots, reconnects and the drain on stop; ``dex.worker.task`` logs every
    failed attempt with its traceback and whether the server retries it. When the process
    configured no logging (no root handler), the first start adds an INFO stderr handler
    to the ``dex`` logger; configure logging yourself to change that.

    Raises:
        FeatureNotAvailableError: ``options`` ask for a listening Worker.

    """

    def __init__(
        self,
        registry: Registry,
        blob_cache: BlobCache | None = None,
        options: WorkerOptions | None = None,
    ) -> None:
        if options is None:
            options = WorkerOptions()
        options.check_pull_only()
        self.registry = registry
        self.blob_cache = blob_cache
        self.options = options
        pull = options.resolved_pull
        self._stop_on_rejection = pull.stop_on_permanent_stream_rejection
        self.max_tasks = pull.resolved_max_tasks(self._default_slots())
        self.reserved_rpc_tasks = pull.resolved_reserved_rpc_tasks(self._default_slots())
        self.max_step_tasks = self.max_tasks - self.reserved_rpc_tasks
        self.app_worker_id = pull.resolved_app_worker_id()
        # this process's identity across reconnects: the server resumes its tasks by it
        self.instance_id = uuid.uuid4().hex
        self.stats = WorkerStats()
        self._flow_specs = list(registry.flow_specs())
        self.flow_types = frozenset(spec.flow_type for spec in self._flow_specs)
        self.stopping = False
        self._started = False
        self._closed = False
        self._finished: asyncio.Event | None = None
        self._ever_registered = False
        self._permanent_error: PullRegistrationError | None = None
        self._stop_event: asyncio.Event | None = None
        self._registered: asyncio.Event | None = None
        self._session = Session(self)
        self._drain_timeout: float | None = None
        self._http: HttpTransport | None = None
        self._blobs: BlobResolver | None = None
        self._threads: ThreadPoolExecutor | None = None

    @staticmethod
    def _default_slots() -> int:
        return DEFAULT_ASYNC_TASK_SLOTS

    # ------------------------------------------------------------------ public API

    @property
    def worker_target(self) -> WorkerTarget:
        """How the server reaches this Worker: always ``WorkerTarget(pull=True)``."""
        return _PULL_TARGET

    @property
    def pull_reserved_rpc_declines(self) -> int:
        """Step tasks declined so far because only the slots reserved for RPCs were free."""
        return self.stats.reserved_rpc_declines

    def pull_registration_state(self) -> PullRegistrationState:
        """Snapshot of the registration: one entry per queue (sticky queue, Flow types).

        One WebSocket registers every queue at once, so they all become ready together.
        """
        registered = self._ever_registered
        error = self._permanent_error
        queues = tuple(
            PullQueueRegistrationState(
                queue=name, has_registered_stream=registered, last_permanent_error=error
            )
            for name in (self.app_worker_id, *sorted(self.flow_types))
        )
        return PullRegistrationState(is_ready=registered, queues=queues)

    async def start(self) -> None:
        """Connect and serve tasks until ``stop()``; returns after the drain.

        Raises:
            RuntimeError: the Worker was started before, or is closed.
            PullRegistrationError: the server rejected the Worker for good and
                ``PullWorkerOptions.stop_on_permanent_stream_rejection`` is set.
            InProcessServerNotFoundError: the address is ``inproc://<name>`` and no
                embedded server of that name runs in this process.

        """
        if self._closed:
            raise RuntimeError("AsyncWorker is closed")
        if self._started:
            raise RuntimeError("an AsyncWorker can be started only once")
        # large values come over HTTP, for an in-process link from the embedded server's
        # address (an unknown inproc:// name raises here, before the Worker counts as started)
        http = HttpTransport(
            self.options.server_address, credential=self.options.credential, timeout=60.0
        )
        self._started = True
        install_default_handler()
        self._events()
        finished = self._finished_event()
        self._http = http
        self._blobs = BlobResolver(self._http, self.blob_cache, self.stats)
        self._threads = ThreadPoolExecutor(self.max_tasks, thread_name_prefix="dex-handler")
        try:
            await self._connect_loop()
        finally:
            self._session.abandon()  # stopped while disconnected: nothing can be delivered
            await self._http.aclose()
            # handlers still running after the drain were cancelled: do not wait for them
            self._threads.shutdown(wait=False, cancel_futures=True)
            finished.set()
            log.info("stopped and disconnected from %s", self.options.server_address)

    async def close(self) -> None:
        """Stop the Worker (draining running tasks) and wait until ``start()`` returned.

        Safe to call more than once, before ``start()`` and from another task than the
        one running ``start()``; the Worker cannot be started afterwards.
        """
        self._closed = True
        await self.stop()
        if self._started:
            await self._finished_event().wait()

    async def __aenter__(self) -> AsyncWorker:
        return self

    async def __aexit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def stop(self, drain_timeout: float | None = None) -> None:
        """Stop taking tasks, let running ones finish, then disconnect.

        Args:
            drain_timeout: seconds to let running tasks finish before cancelling them;
                None uses ``PullWorkerOptions.stop_drain_timeout`` (default 30 s).

        Safe to call more than once and before ``start()``; returns once the request is
        recorded (await ``start()`` to know when the Worker finished).

        """
        self.stopping = True
        if drain_timeout is not None:
            self._drain_timeout = drain_timeout
        self._events()[0].set()

    async def wait_pull_registered(self, timeout: float | None = None) -> None:
        """Wait until the Worker has registered with the server at least once.

        Raises:
            TimeoutError: not registered within ``timeout`` seconds.
            PullRegistrationError: the Worker stopped after a permanent rejection
                (``stop_on_permanent_stream_rejection``).

        """
        registered = self._events()[1]
        finished = self._finished_event()
        async with asyncio.timeout(timeout):
            waiters = {
                asyncio.ensure_future(registered.wait()),
                asyncio.ensure_future(finished.wait()),
            }
            try:
                await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for waiter in waiters:
                    waiter.cancel()
        if registered.is_set():
            return
        if self._permanent_error is not None:
            raise self._permanent_error
        raise RuntimeError("the Worker stopped before it registered")

    def is_registered(self) -> bool:
        """Whether the Worker currently has a registered session."""
        return self._session.connected

    async def run(self) -> None:
        """``start()`` with SIGTERM/SIGINT mapped to a graceful ``stop()``.

        Signal handlers are installed only when called from the main thread.
        """
        loop = asyncio.get_running_loop()
        installed: list[signal.Signals] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
                installed.append(sig)
            except (RuntimeError, ValueError, NotImplementedError):
                pass
        try:
            await self.start()
        finally:
            for sig in installed:
                loop.remove_signal_handler(sig)

    # ------------------------------------------------------------------ used by sessions

    @property
    def blobs(self) -> BlobResolver:
        """The blob resolver of the running Worker (sessions fetch large values with it).

        Only valid between ``start()`` and ``stop()``; the Worker creates it on start.
        """
        assert self._blobs is not None
        return self._blobs

    async def invoke(self, task: Task, io: TaskIO) -> TaskResult:
        """Run one task's handler and return its result; sessions call it per task.

        Handler errors become an error ``TaskResult``; it raises only on cancellation.
        Safe to call concurrently, one call per task.
        """
        return await invoke(self.registry, task, io, executor=self._threads)

    def register_frame(self, resume_task_ids: list[str] | None = None) -> Register:
        """Return the ``Register`` frame a connection sends first.

        It carries the Worker's IDs, Flow specs and task slots, and ``resume_task_ids``:
        the tasks of an earlier connection the Worker still runs or holds a result of.
        """
        return Register(
            app_worker_id=self.app_worker_id,
            flows=self._flow_specs,
            max_concurrent_tasks=self.max_tasks,
            reserved_rpc_tasks=self.reserved_rpc_tasks,
            sdk_version=_sdk_version(),
            worker_instance_id=self.instance_id,
            resume_task_ids=resume_task_ids or [],
            accepts_batches=True,
        )

    # ------------------------------------------------------------------ internals

    def _finished_event(self) -> asyncio.Event:
        if self._finished is None:
            self._finished = asyncio.Event()
        return self._finished

    def _events(self) -> tuple[asyncio.Event, asyncio.Event]:
        if self._stop_event is None or self._registered is None:
            self._stop_event = asyncio.Event()
            self._registered = asyncio.Event()
            if self.stopping:
                self._stop_event.set()
        return self._stop_event, self._registered

    def _on_signal(self, sig: int) -> None:
        log.info("received %s: stopping gracefully", signal.Signals(sig).name)
        self.stopping = True
        self._events()[0].set()

    async def _connect_loop(self) -> None:
        stop_event, registered = self._events()
        backoff = _BACKOFF_MIN_S
        address = self.options.server_address
        inproc = _inproc.is_inproc(address)
        unix = unix_socket_path(address)
        url = address.strip() if inproc else ws_url(address, "/v1/worker")
        how = "in-process link" if inproc else url if unix is None else f"Unix socket {unix}"
        log.info("connecting to %s (%s)", address, how)
        while not self.stopping:
            delay = backoff
            try:
                headers = await self._auth_headers()
                async with self._open(url, headers, inproc=inproc, unix=unix) as ws:
                    session = self._session
                    await session.register(ws, _REGISTER_TIMEOUT_S)
                    self.stats.connections += 1
                    backoff = _BACKOFF_MIN_S
                    self._ever_registered = True
                    self._permanent_error = None
                    registered.set()
                    log.info(
                        "%s %s as %s: serving Flow types [%s], %d task slots (%d for RPCs only)",
                        "reconnected to" if self.stats.connections > 1 else "connected to",
                        self.options.server_address,
                        self.app_worker_id,
                        ", ".join(sorted(self.flow_types)),
                        self.max_tasks,
                        self.reserved_rpc_tasks,
                    )
                    await self._serve_until_stop(session, stop_event)
                    delay = _BACKOFF_MIN_S
            except RegistrationRejectedError as exc:
                permanent = exc.code in _PERMANENT_CODES
                delay = _PERMANENT_BACKOFF_S if permanent else backoff
                hint = _TOKEN_HINT if exc.code == "UNAUTHENTICATED" else ""
                if permanent:
                    self._rejected(exc, hint)
                log.error(
                    "server rejected the Worker registration (%s)%s; retry in %ss",
                    exc,
                    hint,
                    delay,
                )
            except InvalidStatus as exc:
                status = exc.response.status_code
                permanent = status in (401, 403)
                delay = _PERMANENT_BACKOFF_S if permanent else backoff
                hint = _TOKEN_HINT if permanent else ""
                if permanent:
                    self._rejected(exc, hint)
                log.error(
                    "server refused the Worker connection (HTTP %s)%s; retry in %ss",
                    status,
                    hint,
                    delay,
                )
            except _CredentialError as exc:
                log.error("Worker credential failed (%s); retry in %.1fs", exc.__cause__, delay)
            except (OSError, TimeoutError, InvalidHandshake, WebSocketException) as exc:
                log.warning("Worker connection failed (%s); retry in %.1fs", exc, delay)
            backoff = min(backoff * 2, _BACKOFF_MAX_S)
            if not self.stopping:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await stop_event.wait()

    @staticmethod
    def _open(
        url: str, headers: dict[str, str], *, inproc: bool, unix: str | None
    ) -> AbstractAsyncContextManager[ClientConnection]:
        """A WebSocket to the server, or a link to an embedded server of this process.

        ``unix``: the path of the Unix socket to open the WebSocket on, else TCP.
        """
        if inproc:
            # the link has the calls the session makes on a WebSocket (see _inproc)
            link = _inproc.connect(url, headers, max_size=_MAX_FRAME_BYTES)
            return cast(AbstractAsyncContextManager[ClientConnection], link)
        # websockets opens a Unix socket with unix=True and path=
        where: dict[str, Any] = {"unix": True, "path": unix} if unix is not None else {}
        return connect(
            url,
            additional_headers=headers,
            max_size=_MAX_FRAME_BYTES,
            compression=None,
            open_timeout=_REGISTER_TIMEOUT_S,
            create_connection=DirectConnection,
            **where,
        )

    def retry_policy(self, task: Task) -> RetryPolicySpec | None:
        """The registered retry policy of the task's Step method (None for an RPC)."""
        if task.flow_type not in self.flow_types:
            return None
        entry = self.registry.flow_entry(task.flow_type)
        se = entry.steps.get(task.step_type or "")
        if se is None or task.kind == "rpc":
            return None
        options = se.spec.options
        return options.wait_for_retry if task.kind == "wait_for" else options.execute_retry

    async def _auth_headers(self) -> dict[str, str]:
        try:
            return auth_headers(await resolve_token(self.options.credential))
        except Exception as exc:  # the credential's own failure: retry like a lost connection
            raise _CredentialError() from exc

    def _rejected(self, exc: BaseException, hint: str = "") -> None:
        """Record a permanent rejection; raise it when the options say to stop on it."""
        error = PullRegistrationError(self.app_worker_id, exc)
        if hint:
            error.args = (f"{error.args[0]}{hint}",)
        self._permanent_error = error
        if self._stop_on_rejection:
            self.stopping = True
            raise error from exc

    async def _serve_until_stop(self, session: Session, stop_event: asyncio.Event) -> None:
        serving = asyncio.create_task(session.serve(), name="dex-worker-session")
        stopping = asyncio.create_task(stop_event.wait())
        try:
            await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
        if serving.done():
            exc = serving.exception()
            log.warning("connection to the Dex server closed (%s); reconnecting", exc or "EOF")
            return
        drain = (
            self._drain_timeout
            if self._drain_timeout is not None
            else self.options.resolved_pull.resolved_drain_timeout()
        )
        if session.running:
            log.info("stopping: draining %d running task(s), up to %gs", session.running, drain)
        else:
            log.info("stopping: no task running")
        await session.drain(drain)
        await serving
