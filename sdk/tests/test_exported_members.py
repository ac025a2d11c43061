from __future__ import annotations

import types

import dex

DEFINITIONS = {
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
    "Flow",
    "FlowAlreadyStartedError",
    "FlowClosingError",
    "FlowDefinitionError",
    "FlowErrorType",
    "FlowNotActiveOrNotFoundError",
    "FlowNotFoundError",
    "InstanceLoad",
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
    # decision functions and the named parts of the model that are not run yet
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
}

RUNTIME = {
    "AsyncClient",
    "AsyncWorker",
    "Client",
    "ClientOptions",
    "Worker",
    "WorkerOptions",
    "PullWorkerOptions",
    "BlobCacheConfig",
    "open_blob_cache",
    "StartFlowOptions",
    "StopFlowOptions",
    "RPCInvokeOptions",
    "FlowResult",
    "FlowInfo",
}

STATE = {
    "AsyncBufferedTextStream",
    "AttributeIndex",
    "AttributeLock",
    "AttributeMapLoad",
    "BufferedTextStream",
    "ChannelMapLoad",
    "IndexType",
}


def test_definition_exports_are_pinned() -> None:
    exported = set(dex.__all__)
    assert DEFINITIONS <= exported
    assert RUNTIME <= exported
    assert STATE <= exported
    assert len(dex.__all__) == len(exported), "duplicate names in __all__"


def test_every_export_exists_and_is_documented() -> None:
    for name in dex.__all__:
        assert hasattr(dex, name), name
    for name in DEFINITIONS | STATE:
        obj = getattr(dex, name)
        if callable(obj):
            assert obj.__doc__, f"dex.{name} has no docstring"
            assert obj.__module__.startswith("dex"), name


def test_private_modules_stay_private() -> None:
    public = {
        n
        for n in dir(dex)
        if not n.startswith("_") and not isinstance(getattr(dex, n), types.ModuleType)
    }
    assert public - set(dex.__all__) <= {"annotations"}
