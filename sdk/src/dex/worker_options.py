"""Worker options: ``WorkerOptions``, ``PullWorkerOptions``, ``WorkerTarget``."""

from __future__ import annotations

from dex._worker import PullWorkerOptions, WorkerOptions, WorkerTarget

__all__ = ["PullWorkerOptions", "WorkerOptions", "WorkerTarget"]
