"""Exceptions raised by the Dex SDK.

The tree::

    DexError
    ├── FlowDefinitionError          a Flow, Step, RPC or schema is invalid (at Registry time)
    ├── ValueMappingError            a value does not match its declared type
    ├── InvalidStepResultError       a handler returned something that is not a Wait/decision
    ├── AttributeMapNotLoadedError   reading a map instance the method did not load
    ├── InvalidMapKeyError           a map instance key is not a non-empty string (a ValueError)
    ├── ChannelMessagesNotLoadedError
    ├── FeatureNotAvailableError     a named part of the Dex model this release does not run yet
    └── DexServiceError              the server answered with an error (has .code)
        ├── FlowAlreadyStartedError
        ├── FlowNotFoundError
        ├── FlowNotActiveOrNotFoundError
        ├── FlowClosingError
        ├── UnknownFlowTypeError
        ├── WorkerInvocationError
        ├── NoWorkerAvailableError
        ├── RpcLockConflictError      (retryable)
        ├── LongPollTimeoutError      (retryable)
        ├── RequestTimeoutError       (retryable)
        ├── ChannelMessageNotFoundError
        ├── LimitExceededError
        ├── UnauthenticatedError
        ├── BadRequestError
        └── ServiceUnavailableError   (retryable)

Control signals that user code must not swallow derive from ``BaseException`` and live
next to the code that raises them.
"""

from __future__ import annotations

from typing import NoReturn

from dex._protocol import ErrorCode


class DexError(Exception):
    """Root of every exception the SDK raises."""


class FlowDefinitionError(DexError):
    """A Flow, Step, RPC, schema or codec is invalid; raised when the Registry is built."""


class ValueMappingError(DexError):
    """A value cannot be encoded to, or decoded from, its declared type."""


class InvalidStepResultError(DexError):
    """A handler returned something other than the Wait or StepDecision it must return."""


class AttributeMapNotLoadedError(DexError):
    """An AttributeMap instance was read by a method or RPC that did not load it."""


class InvalidMapKeyError(DexError, ValueError):
    """An AttributeMap or ChannelMap instance key is not a non-empty string.

    Any non-empty string is a valid key, ``/`` included. Also a ``ValueError``, so code
    that validates its input with ``except ValueError`` catches it.
    """


class ChannelMessagesNotLoadedError(DexError):
    """Pending Channel messages were read by a method or RPC that did not load them."""


class DexServiceError(DexError):
    """The server rejected a request.

    Attributes:
        code: a stable error code (``dex._protocol.ErrorCode``).
        detail: optional extra text from the server.
        flow_id: the Flow the request named, when there was one.
        retryable: whether the same request may succeed later.
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = ErrorCode.INTERNAL,
        detail: str | None = None,
        flow_id: str | None = None,
        retryable: bool = False,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.detail = detail
        self.flow_id = flow_id
        self.retryable = retryable


class FlowAlreadyStartedError(DexServiceError):
    """A Flow with this ID exists and the ID reuse policy rejects another run."""


class FlowNotFoundError(DexServiceError):
    """No Flow with this ID exists (or it was deleted after retention)."""


class FlowNotActiveOrNotFoundError(DexServiceError):
    """The Flow is closed or missing, and the operation needs a running Flow."""


class FlowClosingError(DexServiceError):
    """The Flow is closing; the request was rejected."""


class UnknownFlowTypeError(DexServiceError):
    """The Flow type or a Step type is not known to the server."""


class WorkerInvocationError(DexServiceError):
    """An RPC handler raised on the Worker; ``detail`` carries its type and message."""


class NoWorkerAvailableError(DexServiceError):
    """No Worker serving this Flow type accepted the task in time."""


class RpcLockConflictError(DexServiceError):
    """An RPC asked for an Attribute lock that a Step or another RPC holds. Retry later."""


class LongPollTimeoutError(DexServiceError):
    """A long poll ended before its event happened. Call again."""


class RequestTimeoutError(DexServiceError):
    """The request took longer than its timeout."""


class ChannelMessageNotFoundError(DexServiceError):
    """A transactional RPC deleted a Channel message that is not pending."""


class LimitExceededError(DexServiceError):
    """A size or count limit was exceeded; the message names the limit."""


class UnauthenticatedError(DexServiceError):
    """The server requires a token and none (or a wrong one) was presented."""


class BadRequestError(DexServiceError):
    """The request was malformed or named something that does not exist."""


class ServiceUnavailableError(DexServiceError):
    """The server or its store is temporarily unavailable. Retry later."""


_BY_CODE: dict[str, type[DexServiceError]] = {
    ErrorCode.FLOW_ALREADY_STARTED: FlowAlreadyStartedError,
    ErrorCode.FLOW_NOT_FOUND: FlowNotFoundError,
    ErrorCode.FLOW_NOT_ACTIVE: FlowNotActiveOrNotFoundError,
    ErrorCode.FLOW_CLOSING: FlowClosingError,
    ErrorCode.UNKNOWN_FLOW_TYPE: UnknownFlowTypeError,
    ErrorCode.UNKNOWN_RPC: BadRequestError,
    ErrorCode.WORKER_API_ERROR: WorkerInvocationError,
    ErrorCode.NO_WORKER_AVAILABLE: NoWorkerAvailableError,
    ErrorCode.RPC_LOCK_CONFLICT: RpcLockConflictError,
    ErrorCode.LONG_POLL_TIMEOUT: LongPollTimeoutError,
    ErrorCode.REQUEST_TIMEOUT: RequestTimeoutError,
    ErrorCode.CHANNEL_MESSAGE_NOT_FOUND: ChannelMessageNotFoundError,
    ErrorCode.LIMIT_EXCEEDED: LimitExceededError,
    ErrorCode.UNAUTHENTICATED: UnauthenticatedError,
    ErrorCode.BAD_REQUEST: BadRequestError,
    ErrorCode.UNAVAILABLE: ServiceUnavailableError,
}


def error_from_code(
    code: str,
    message: str,
    *,
    detail: str | None = None,
    flow_id: str | None = None,
    retryable: bool = False,
) -> DexServiceError:
    """Build the exception class that matches a server error code."""
    cls = _BY_CODE.get(code, DexServiceError)
    return cls(message, code=code, detail=detail, flow_id=flow_id, retryable=retryable)


class FeatureNotAvailableError(DexError, NotImplementedError):
    """A part of the Dex model that this release accepts by name but does not run yet.

    The names and option shapes exist so that code written for the full model imports and
    type-checks; calling into such a feature raises this error at once, before anything is
    sent to the server. ``feature`` names what was used (for example ``"SubFlows"``).
    """

    def __init__(self, feature: str) -> None:
        super().__init__(f"{feature} is not available in this release of Dex for Python")
        self.feature = feature


def feature_not_available(feature: str) -> NoReturn:
    """Raise :class:`FeatureNotAvailableError` for ``feature`` (a helper for SDK internals)."""
    raise FeatureNotAvailableError(feature)


class PullRegistrationError(RuntimeError):
    """The server rejected a pull Worker's registration for good.

    Bad credentials or an invalid registration. Raised by ``Worker.start()`` when
    ``PullWorkerOptions.stop_on_permanent_stream_rejection`` is set, and recorded in
    ``pull_registration_state()``. ``queue`` names the rejected queue, ``error`` the cause.
    """

    def __init__(self, queue: str, error: BaseException) -> None:
        super().__init__(f"pull Worker queue {queue!r} registration rejected: {error}")
        self.queue = queue
        self.error = error
