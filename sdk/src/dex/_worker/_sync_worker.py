"""``Worker``: the blocking facade over ``AsyncWorker`` for sync-only registries."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from dex._blob_cache import BlobCache
from dex._registry import Registry
from dex._worker._async_worker import AsyncWorker
from dex._worker._options import WorkerOptions, default_thread_slots
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
        blob_cache: optional persistent ``BlobCache``.
        options: server address, task slots, drain timeout, credential.

    Task slots: ``PullWorkerOptions.max_concurrent_tasks`` handlers at once, each on its
    own thread (default ``max(16, 4 × CPUs)``), of which ``reserved_rpc_tasks`` (default
    1) only RPCs use.

    ``start()`` blocks the calling thread until ``stop()`` is called from another thread
    (or, with ``run()`` on the main thread, until SIGTERM/SIGINT).

    Raises:
        FlowDefinitionError: the registry has async handlers.

    """

    def __init__(
        self,
        registry: Registry,
        blob_cache: BlobCache | None = None,
        options: WorkerOptions = WorkerOptions(),  # noqa: B008 - frozen, safe to share
    ) -> None:
        if registry.has_async_handlers:
            raise FlowDefinitionError(
                "Worker runs sync handlers only; this Registry has async handlers (use AsyncWorker)"
            )
        self._worker = _ThreadWorker(registry, blob_cache, options)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._ready = threading.Event()
        self._finished = threading.Event()

    @property
    def stats(self) -> WorkerStats:
        """Live counters of this Worker."""
        return self._worker.stats

    @property
    def app_worker_id(self) -> str:
        """Return the id this Worker registers with."""
        return self._worker.app_worker_id

    def start(self) -> None:
        """Serve tasks until ``stop()``; blocks the calling thread."""
        self._serve(self._worker.start)

    def run(self) -> None:
        """Like ``start()``, stopping gracefully on SIGTERM/SIGINT (main thread only)."""
        self._serve(self._worker.run)

    def stop(self, drain_timeout: float | None = None, *, wait: bool = True) -> None:
        """Stop from another thread: drain running tasks (see ``AsyncWorker.stop``).

        With ``wait=True`` (default) returns once ``start()`` has finished.
        """
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

    def wait_pull_registered(self, timeout: float | None = None) -> None:
        """Block until the Worker registered once (``TimeoutError`` after ``timeout``)."""
        if not self._ready.wait(timeout):
            raise TimeoutError("Worker not started")
        assert self._loop is not None
        fut = asyncio.run_coroutine_threadsafe(
            self._worker.wait_pull_registered(timeout), self._loop
        )
        fut.result()

    def _serve(self, main: Any) -> None:
        async def body() -> None:
            self._loop = asyncio.get_running_loop()
            self._ready.set()
            await main()

        try:
            asyncio.run(body())
        finally:
            self._finished.set()
            self._ready.set()
