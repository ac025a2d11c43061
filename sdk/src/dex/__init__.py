"""Dex for Python SDK."""

from __future__ import annotations

__all__: list[str] = []

# --------------------------------------------------------------------------- runtime
# Client, Worker and blob cache. This block is maintained with dex/_client, dex/_worker
# and dex/_blob_cache.py; keep it at the end of the file.
from dex._blob_cache import BlobCache, BlobCacheConfig, open_blob_cache
from dex._client import (
    AsyncClient,
    Client,
    ClientOptions,
    FlowCompletion,
    FlowInfo,
    FlowListPage,
    FlowResult,
    FlowStatus,
    IdReusePolicy,
    RPCInvokeOptions,
    StartFlowOptions,
    StopFlowOptions,
    StopType,
    StreamMessage,
    StreamMessagesPage,
)
from dex._protocol import FlowStateWire, HealthResponse, HistoryPage
from dex._worker import (
    AsyncWorker,
    PullWorkerOptions,
    Worker,
    WorkerOptions,
    WorkerStats,
)

__all__ += [
    "AsyncClient",
    "AsyncWorker",
    "BlobCache",
    "BlobCacheConfig",
    "Client",
    "ClientOptions",
    "FlowCompletion",
    "FlowInfo",
    "FlowListPage",
    "FlowResult",
    "FlowStateWire",
    "FlowStatus",
    "HealthResponse",
    "HistoryPage",
    "IdReusePolicy",
    "PullWorkerOptions",
    "RPCInvokeOptions",
    "StartFlowOptions",
    "StopFlowOptions",
    "StopType",
    "StreamMessage",
    "StreamMessagesPage",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "open_blob_cache",
]
