"""``Worker``: the blocking facade over ``AsyncWorker`` for sync-only registries."""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import Any

from dex._blob_cache import BlobCache
from dex._registry import Registry
from dex._worker._async_worker import AsyncWorker
from dex._worker._options import WorkerOptions, WorkerTarget, default_thread_slots
from dex._worker._registration import PullRegistrationState
from dex._worker._stats import WorkerStats
from dex.errors import FlowDefinitionError


class _ThreadWorker(AsyncWorker):
    """The ``AsyncWorker`` under a sync ``Worker``: every handler holds a thread."""

    @staticmethod
    def _default_slots() -> int:
        return default_thread_slots()


class Worker:
    """Runs a Registry's sync handlers (on a thread pool) for the server, blocking.

    Args:
        registry: a ``Registry`` without async handlers (use ``AsyncWorker`` for those).
        blob_cache: a ``BlobCache`` (``open_blob_cache(...)`` or any object with its
            methods); None keeps recent blobs in memory only.
        options: server address, task slots, drain timeout, credential; None →
            ``WorkerOptions()``.

    Task slots: ``PullWorkerOptions.max_concurrent_tasks`` handlers at once, each on its
    own thread (default ``max(16, 4 × CPUs)``), of which ``reserved_rpc_tasks`` (default
    1) only RPCs use.

    ``start()`` blocks the calling thread until ``stop()`` or ``close()`` is called from
    another thread (or, with ``run()`` on the main thread, until SIGTERM/SIGINT).
    ``with Worker(...) as worker:`` closes the Worker on exit. It logs like
    ``AsyncWorker`` (loggers ``dex.worker`` and ``dex.worker.task``).

    Raises:
        FlowDefinitionError: the registry has async handlers.
        FeatureNotAvailableError: ``options`` ask for a listening Worker.

    """

    def __init__(
        self,
        registry: Registry,
        blob_cache: BlobCache | None = None,
        options: WorkerOptions | None = None,
    ) -> None:
        if registry.has_async_handlers:
            raise FlowDefinitionError(
                "Worker runs sync handlers only; this Registry has async handlers (use AsyncWorker)"
            )
        self._worker = _ThreadWorker(registry, blob_cache, options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._started = False
        self._closed = False
        self._ready = threading.Event()
        self._finished = threading.Event()

    @property
    def registry(self) -> Registry:
        """The Registry this Worker serves."""
        return self._worker.registry

    @property
    def blob_cache(self) -> BlobCache | None:
        """The blob cache given at construction."""
        return self._worker.blob_cache

    @property
    def options(self) -> WorkerOptions:
        """The options in effect (``WorkerOptions()`` when None was given)."""
        return self._worker.options

    @property
    def worker_target(self) -> WorkerTarget:
        """How the server reaches this Worker: always ``WorkerTarget(pull=True)``."""
        return self._worker.worker_target

    @property
    def pull_reserved_rpc_declines(self) -> int:
        """Step tasks declined so far because only the slots reserved for RPCs were free."""
        return self._worker.pull_reserved_rpc_declines

    @property
    def stats(self) -> WorkerStats:
        """Live counters of this Worker."""
        return self._worker.stats

    @property
    def app_worker_id(self) -> str:
        """Return the id this Worker registers with."""
        return self._worker.app_worker_id

    def pull_registration_state(self) -> PullRegistrationState:
        """Snapshot of the registration (see ``AsyncWorker.pull_registration_state``)."""
        return self._worker.pull_registration_state()

    def start(self) -> None:
        """Serve tasks until ``stop()``; blocks the calling thread.

        Raises:
            RuntimeError: the Worker was started before, or is closed.
            PullRegistrationError: permanent rejection with
                ``stop_on_permanent_stream_rejection``.

        """
        self._serve(self._worker.start)

    def run(self) -> None:
        """Like ``start()``, stopping gracefully on SIGTERM/SIGINT (main thread only)."""
        self._serve(self._worker.run)

    def stop(self, drain_timeout: float | None = None, *, wait: bool = True) -> None:
        """Stop from another thread: drain running tasks (see ``AsyncWorker.stop``).

        With ``wait=True`` (default) returns once ``start()`` has finished. Before
        ``start()`` it only marks the Worker as stopping.
        """
        with self._lock:
            started = self._started
            if not started:
                self._worker.stopping = True
        if not started:
            return
        self._ready.wait()
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        async def request() -> None:
            await self._worker.stop(drain_timeout)

        try:
            asyncio.run_coroutine_threadsafe(request(), loop).result()
        except RuntimeError:  # loop already finished
            return
        if wait:
            self._finished.wait()

    def close(self) -> None:
        """Stop (draining running tasks), wait for ``start()`` to return; not restartable.

        Safe to call more than once and before ``start()``.
        """
        with self._lock:
            self._closed = True
        self.stop()

    def __enter__(self) -> Worker:
        return self

    def __exit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def wait_pull_registered(self, timeout: float | None = None) -> None:
        """Block until the Worker registered once (``TimeoutError`` after ``timeout``).

        Raises:
            TimeoutError: not started or not registered within ``timeout`` seconds.
            PullRegistrationError: see ``AsyncWorker.wait_pull_registered``.

        """
        if not self._ready.wait(timeout):
            raise TimeoutError("Worker not started")
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(
            self._worker.wait_pull_registered(timeout), self._loop
        )
        fut.result()

    def _serve(self, main: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("Worker is closed")
            if self._started:
                raise RuntimeError("a Worker can be started only once")
            self._started = True

        async def body() -> None:
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            await main()

        try:
            asyncio.run(body())
        finally:
            self._finished.set()
            self._ready.set()
