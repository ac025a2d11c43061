"""Dispatch: ready queues, Worker connections, task slots, locks, leases, Streams."""

from __future__ import annotations

from dex_server.dispatch._dispatcher import (
    Dispatcher,
    DispatchHost,
    RpcLostError,
    RpcNoWorkerError,
    RpcTimeoutError,
)
from dex_server.dispatch._model import Envelope, InFlight, WorkerConn
from dex_server.dispatch._streams import StreamHub

__all__ = [
    "DispatchHost",
    "Dispatcher",
    "Envelope",
    "InFlight",
    "RpcLostError",
    "RpcNoWorkerError",
    "RpcTimeoutError",
    "StreamHub",
    "WorkerConn",
]
