"""Clients: start, stop, wait for and talk to Flows over the server's HTTP API."""

from __future__ import annotations

from dex._client._async_client import AsyncClient
from dex._client._options import (
    ClientOptions,
    IdReusePolicy,
    RPCInvokeOptions,
    StartFlowOptions,
    StopFlowOptions,
    StopType,
)
from dex._client._sync_client import Client
from dex._client._types import (
    FlowCompletion,
    FlowInfo,
    FlowListPage,
    FlowResult,
    FlowStatus,
    StreamMessage,
    StreamMessagesPage,
)

__all__ = [
    "AsyncClient",
    "Client",
    "ClientOptions",
    "FlowCompletion",
    "FlowInfo",
    "FlowListPage",
    "FlowResult",
    "FlowStatus",
    "IdReusePolicy",
    "RPCInvokeOptions",
    "StartFlowOptions",
    "StopFlowOptions",
    "StopType",
    "StreamMessage",
    "StreamMessagesPage",
]
