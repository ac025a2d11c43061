"""The errors the SDK raises at run time."""

from __future__ import annotations

from dex import (
    AttributeMapNotLoadedError,
    ChannelMessageNotFoundError,
    ChannelMessagesNotLoadedError,
    DexServiceError,
    ErrorSubStatus,
    FlowAlreadyStartedError,
    FlowClosingError,
    FlowDefinitionError,
    FlowErrorType,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    InvalidStepResultError,
    LongPollTimeoutError,
    RequestTimeoutError,
    RpcLockConflictError,
    ValueMappingError,
    WorkerInvocationError,
)

__all__ = [
    "AttributeMapNotLoadedError",
    "ChannelMessageNotFoundError",
    "ChannelMessagesNotLoadedError",
    "DexServiceError",
    "ErrorSubStatus",
    "FlowAlreadyStartedError",
    "FlowClosingError",
    "FlowDefinitionError",
    "FlowErrorType",
    "FlowNotActiveOrNotFoundError",
    "FlowNotFoundError",
    "InvalidStepResultError",
    "LongPollTimeoutError",
    "RequestTimeoutError",
    "RpcLockConflictError",
    "ValueMappingError",
    "WorkerInvocationError",
]
