"""Workers: pull tasks from the server over one WebSocket and run the handlers."""

from __future__ import annotations

from dex._worker._async_worker import AsyncWorker
from dex._worker._options import PullWorkerOptions, WorkerOptions, WorkerTarget
from dex._worker._registration import PullQueueRegistrationState, PullRegistrationState
from dex._worker._stats import WorkerStats
from dex._worker._sync_worker import Worker

__all__ = [
    "AsyncWorker",
    "PullQueueRegistrationState",
    "PullRegistrationState",
    "PullWorkerOptions",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "WorkerTarget",
]
