"""The asyncio Worker: ``AsyncWorker``."""

from __future__ import annotations

from dex._worker import AsyncWorker

__all__ = ["AsyncWorker"]
