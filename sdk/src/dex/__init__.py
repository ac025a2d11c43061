"""Dex for Python: durable Flows made of Steps, with durable state, Channels, Streams and RPCs.

Define a ``Flow`` of ``Step``s with a ``PersistenceSchema``, register it in a ``Registry``,
serve it with a ``Worker`` / ``AsyncWorker`` and call it with a ``Client`` / ``AsyncClient``.
"""

from __future__ import annotations

from dex._codec import Codec, CodecRegistry, codec_for
from dex._context import AsyncContext, Context, RecoveryErrorInfo
from dex._decisions import StepDecision, StepMovement
from dex._flow import Flow, PersistenceSchema, StepList
from dex._options import RetryPolicy, StepDurability, StepOptions, WaitForFailurePolicy
from dex._registry import Registry
from dex._rpc import RPCResult, rpc
from dex._state import (
    Attribute,
    AttributeMap,
    BufferedText,
    Channel,
    ChannelLoad,
    ChannelMap,
    ChannelMessage,
    InstanceLoad,
    LockKey,
    Stream,
)
from dex._step import Step, StepOutput, heartbeat
from dex._waits import ChannelCondition, Timer, TimerCondition, Wait
from dex.errors import (
    ApiKeyExchangeError,
    AttributeMapNotLoadedError,
    BadRequestError,
    ChannelMessageNotFoundError,
    ChannelMessagesNotLoadedError,
    DexError,
    DexServiceError,
    ErrorSubStatus,
    FeatureNotAvailableError,
    FlowAlreadyStartedError,
    FlowClosingError,
    FlowDefinitionError,
    FlowErrorType,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    InvalidMapKeyError,
    InvalidStepResultError,
    LimitExceededError,
    LongPollTimeoutError,
    NoWorkerAvailableError,
    PullRegistrationError,
    RequestTimeoutError,
    RetryAfterError,
    RpcLockConflictError,
    ServiceUnavailableError,
    StatusCode,
    UnauthenticatedError,
    UnknownFlowTypeError,
    ValueMappingError,
    WorkerInvocationError,
    retry_after,
)

__all__: list[str] = [
    "ApiKeyExchangeError",
    "AsyncContext",
    "Attribute",
    "AttributeMap",
    "AttributeMapNotLoadedError",
    "BadRequestError",
    "BufferedText",
    "Channel",
    "ChannelCondition",
    "ChannelLoad",
    "ChannelMap",
    "ChannelMessage",
    "ChannelMessageNotFoundError",
    "ChannelMessagesNotLoadedError",
    "Codec",
    "CodecRegistry",
    "Context",
    "DexError",
    "DexServiceError",
    "ErrorSubStatus",
    "FeatureNotAvailableError",
    "Flow",
    "FlowAlreadyStartedError",
    "FlowClosingError",
    "FlowDefinitionError",
    "FlowErrorType",
    "FlowNotActiveOrNotFoundError",
    "FlowNotFoundError",
    "InstanceLoad",
    "InvalidMapKeyError",
    "InvalidStepResultError",
    "LimitExceededError",
    "LockKey",
    "LongPollTimeoutError",
    "NoWorkerAvailableError",
    "PersistenceSchema",
    "PullRegistrationError",
    "RPCResult",
    "RecoveryErrorInfo",
    "Registry",
    "RequestTimeoutError",
    "RetryAfterError",
    "RetryPolicy",
    "RpcLockConflictError",
    "ServiceUnavailableError",
    "StatusCode",
    "Step",
    "StepDecision",
    "StepDurability",
    "StepList",
    "StepMovement",
    "StepOptions",
    "StepOutput",
    "Stream",
    "Timer",
    "TimerCondition",
    "UnauthenticatedError",
    "UnknownFlowTypeError",
    "ValueMappingError",
    "Wait",
    "WaitForFailurePolicy",
    "WorkerInvocationError",
    "codec_for",
    "heartbeat",
    "retry_after",
    "rpc",
]

# --------------------------------------------------------------------------- runtime
# Client, Worker and blob cache. This block is maintained with dex/_client, dex/_worker
# and dex/_blob_cache.py; keep it at the end of the file.
from dex._blob_cache import BlobCache, BlobCacheConfig, open_blob_cache
from dex._client import (
    AsyncClient,
    AttributeMatch,
    Client,
    ClientOptions,
    FlowCompletion,
    FlowInfo,
    FlowListPage,
    FlowResult,
    FlowStatus,
    FlowTimeoutHandlerOptions,
    FlowTimeoutPolicy,
    HealthInfo,
    IdReusePolicy,
    RPCInvokeOptions,
    SearchFlowEntry,
    SearchFlowsPage,
    StartFlowOptions,
    StepCompletion,
    StopFlowOptions,
    StopType,
    StreamMessage,
    StreamMessagesPage,
    TimeTravelOptions,
    TimeTravelStepMethod,
    TimeTravelType,
    WaitForAttributeOptions,
    WaitForStepCompletionOptions,
)
from dex._flow_config import ActiveStepSearchMode, FlowConfig
from dex._protocol import (
    AttributeRangeSpec,
    AttributeValuesWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    ReadAttributesRequest,
)
from dex._step_execution import StepExecutionId, TimerId
from dex._worker import (
    AsyncWorker,
    PullWorkerOptions,
    Worker,
    WorkerOptions,
    WorkerStats,
)
from dex._worker_target import WorkerTarget

# --------------------------------------------------------------------------- workers, codecs
# Worker registration state, credentials and the Value codec API. This block is maintained
# with dex/_worker, dex/_credential.py and dex/_codec.py.
# isort: split
from dex._codec import BOOL, BYTES, DOUBLE, INT64, STRING, JsonCodec, Value, WireKind
from dex._credential import ApiKeyCredential, Credential, FileCredential
from dex._worker import PullQueueRegistrationState, PullRegistrationState

__all__ += [
    "BOOL",
    "BYTES",
    "DOUBLE",
    "INT64",
    "STRING",
    "ApiKeyCredential",
    "Credential",
    "FileCredential",
    "JsonCodec",
    "PullQueueRegistrationState",
    "PullRegistrationState",
    "Value",
    "WireKind",
    "WorkerTarget",
]

__all__ += [
    "ActiveStepSearchMode",
    "AsyncClient",
    "AsyncWorker",
    "AttributeMatch",
    "AttributeRangeSpec",
    "AttributeValuesWire",
    "BlobCache",
    "BlobCacheConfig",
    "Client",
    "ClientOptions",
    "FlowCompletion",
    "FlowConfig",
    "FlowInfo",
    "FlowListPage",
    "FlowResult",
    "FlowStateWire",
    "FlowStatus",
    "FlowTimeoutHandlerOptions",
    "FlowTimeoutPolicy",
    "HealthInfo",
    "HealthResponse",
    "HistoryPage",
    "IdReusePolicy",
    "PullWorkerOptions",
    "RPCInvokeOptions",
    "ReadAttributesRequest",
    "SearchFlowEntry",
    "SearchFlowsPage",
    "StartFlowOptions",
    "StepCompletion",
    "StepExecutionId",
    "StopFlowOptions",
    "StopType",
    "StreamMessage",
    "StreamMessagesPage",
    "TimeTravelOptions",
    "TimeTravelStepMethod",
    "TimeTravelType",
    "TimerId",
    "WaitForAttributeOptions",
    "WaitForStepCompletionOptions",
    "Worker",
    "WorkerOptions",
    "WorkerStats",
    "open_blob_cache",
]

# --------------------------------------------------------------------------- state
# Locks, load requests, indexes and buffered Stream writers of the state handles.
from dex._state import (  # noqa: E402 - a block of its own, after __all__
    AsyncBufferedTextStream,
    AttributeIndex,
    AttributeLock,
    AttributeMapLoad,
    BufferedTextStream,
    ChannelMapLoad,
    IndexType,
)

__all__ += [
    "AsyncBufferedTextStream",
    "AttributeIndex",
    "AttributeLock",
    "AttributeMapLoad",
    "BufferedTextStream",
    "ChannelMapLoad",
    "IndexType",
]

# --------------------------------------------------------------------------- flow definition
# Decision functions, SubFlows and condition combinations of the Dex model's flow
# definition.
from dex._decisions import (  # noqa: E402
    dead_end,
    force_complete,
    force_complete_if_channels_empty,
    force_fail,
    go_to,
    go_to_many,
    graceful_complete,
)
from dex._subflows import SubFlowOptions, SubFlowReusePolicy  # noqa: E402
from dex._waits import ConditionCombination, SubFlow  # noqa: E402

__all__ += [
    "ConditionCombination",
    "SubFlow",
    "SubFlowOptions",
    "SubFlowReusePolicy",
    "dead_end",
    "force_complete",
    "force_complete_if_channels_empty",
    "force_fail",
    "go_to",
    "go_to_many",
    "graceful_complete",
]
