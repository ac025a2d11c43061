"""Clients: start, stop, wait for and talk to Flows over the server's HTTP API."""

from __future__ import annotations

from dex._client._async_client import AsyncClient
from dex._client._options import (
    ClientOptions,
    FlowTimeoutHandlerOptions,
    FlowTimeoutPolicy,
    IdReusePolicy,
    RPCInvokeOptions,
    StartFlowOptions,
    StopFlowOptions,
    StopType,
    TimeTravelOptions,
    TimeTravelStepMethod,
    TimeTravelType,
)
from dex._client._sync_client import Client
from dex._client._types import (
    FlowCompletion,
    FlowErrorType,
    FlowInfo,
    FlowListPage,
    FlowResult,
    FlowStatus,
    HealthInfo,
    SearchFlowEntry,
    SearchFlowsPage,
    StepCompletion,
    StreamMessage,
    StreamMessagesPage,
)
from dex._client._wait_options import (
    AttributeMatch,
    WaitForAttributeOptions,
    WaitForStepCompletionOptions,
)

__all__ = [
    "AsyncClient",
    "AttributeMatch",
    "Client",
    "ClientOptions",
    "FlowCompletion",
    "FlowErrorType",
    "FlowInfo",
    "FlowListPage",
    "FlowResult",
    "FlowStatus",
    "FlowTimeoutHandlerOptions",
    "FlowTimeoutPolicy",
    "HealthInfo",
    "IdReusePolicy",
    "RPCInvokeOptions",
    "SearchFlowEntry",
    "SearchFlowsPage",
    "StartFlowOptions",
    "StepCompletion",
    "StopFlowOptions",
    "StopType",
    "StreamMessage",
    "StreamMessagesPage",
    "TimeTravelOptions",
    "TimeTravelStepMethod",
    "TimeTravelType",
    "WaitForAttributeOptions",
    "WaitForStepCompletionOptions",
]
