"""Dispatch: ready queues, Worker connections, task slots, locks, leases, Streams."""

from __future__ import annotations

from dex_server.dispatch._dispatcher import (
    Dispatcher,
    DispatchHost,
    RpcLostError,
    RpcNoWorkerError,
    RpcTimeoutError,
)
from dex_server.dispatch._model import (
    SCHEDULE_TO_START_TIMEOUT,
    Envelope,
    InFlight,
    WorkerConn,
    schedule_to_start_error,
)
from dex_server.dispatch._streams import StreamHub

__all__ = [
    "SCHEDULE_TO_START_TIMEOUT",
    "DispatchHost",
    "Dispatcher",
    "Envelope",
    "InFlight",
    "RpcLostError",
    "RpcNoWorkerError",
    "RpcTimeoutError",
    "StreamHub",
    "WorkerConn",
    "schedule_to_start_error",
]
