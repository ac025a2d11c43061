"""Exceptions raised by the Dex SDK, and the status enums they carry.

The tree::

    RuntimeError
    └── DexError                         root of every exception the SDK raises
        ├── FlowDefinitionError          a Flow, Step, RPC or schema is invalid (at Registry time)
        │   └── InvalidStepResultError   a handler returned something that is not a Wait/decision
        ├── ValueMappingError            a value does not match its declared type
        ├── AttributeMapNotLoadedError   reading a map instance the method did not load
        ├── InvalidMapKeyError           a map instance key is not a non-empty string (a ValueError)
        ├── ChannelMessagesNotLoadedError
        ├── PullRegistrationError        the server refused a pull Worker queue's registration
        ├── InProcessServerNotFoundError no embedded server of an inproc:// name in this process
        ├── ApiKeyExchangeError          an API key could not be exchanged for a token
        ├── FeatureNotAvailableError     a named part of the model not run yet (NotImplementedError)
        └── DexServiceError              the server answered with an error (.code, .sub_status, ...)
            ├── FlowAlreadyStartedError
            ├── FlowNotFoundError
            ├── FlowNotActiveOrNotFoundError
            ├── FlowClosingError
            ├── UnknownFlowTypeError
            ├── WorkerInvocationError     (.worker_code, .worker_error_type, .worker_error_detail)
            ├── NoWorkerAvailableError
            ├── RpcLockConflictError      (retryable)
            ├── LongPollTimeoutError      (retryable)
            ├── RequestTimeoutError       (retryable)
            ├── ChannelMessageNotFoundError
            ├── LimitExceededError
            ├── UnauthenticatedError
            ├── BadRequestError
            ├── ServiceUnavailableError   (retryable)
            ├── StepExecutionNotFoundError
            ├── TimerNotFoundError
            └── TimerNotPendingError

    Exception
    └── RetryAfterError                  raised by a handler (``raise retry_after(s, cause)``)

Every SDK error is a ``RuntimeError``, so ``except RuntimeError`` catches them all.

**Status codes.** ``DexServiceError.code`` is a :class:`StatusCode`: the gRPC status codes
(same names, same ``value`` pairs such as ``(5, "not found")``) defined here, so that the SDK
does not need ``grpcio``. When ``grpcio`` is installed, a ``StatusCode`` member compares
equal to, and hashes like, the ``grpc.StatusCode`` member of the same name, so
``exc.code == grpc.StatusCode.NOT_FOUND`` and ``{grpc.StatusCode.NOT_FOUND: ...}[exc.code]``
work; ``StatusCode.of(grpc.StatusCode.NOT_FOUND)`` converts the other way round and
``code.to_grpc()`` returns grpc's member. The constructors accept either kind.

``sub_status`` (an :class:`ErrorSubStatus`) says which Dex condition the status stands for.
Beyond the status pair, every ``DexServiceError`` carries ``error_code``, the finer, stable
code of the server's HTTP API (``dex._protocol.ErrorCode``, for example
``"RPC_LOCK_CONFLICT"``), and ``retryable``.

Control signals that user code must not swallow derive from ``BaseException`` and live
next to the code that raises them.
"""

from __future__ import annotations

import importlib
import sys
from enum import Enum
from typing import Any, ClassVar, Literal, NoReturn

from dex._protocol import ErrorCode


class StatusCode(Enum):
    """The gRPC status codes, without depending on ``grpcio``.

    Members have the names and ``value`` pairs (number, text) of ``grpc.StatusCode``, and
    compare equal to (and hash like) grpc's members of the same name.
    """

    OK = (0, "ok")
    CANCELLED = (1, "cancelled")
    UNKNOWN = (2, "unknown")
    INVALID_ARGUMENT = (3, "invalid argument")
    DEADLINE_EXCEEDED = (4, "deadline exceeded")
    NOT_FOUND = (5, "not found")
    ALREADY_EXISTS = (6, "already exists")
    PERMISSION_DENIED = (7, "permission denied")
    RESOURCE_EXHAUSTED = (8, "resource exhausted")
    FAILED_PRECONDITION = (9, "failed precondition")
    ABORTED = (10, "aborted")
    OUT_OF_RANGE = (11, "out of range")
    UNIMPLEMENTED = (12, "unimplemented")
    INTERNAL = (13, "internal")
    UNAVAILABLE = (14, "unavailable")
    DATA_LOSS = (15, "data loss")
    UNAUTHENTICATED = (16, "unauthenticated")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, StatusCode):
            return self is other
        if _is_grpc_status(other):
            return bool(self.name == other.name)  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        # the hash of an Enum member (and so of grpc's) is the hash of its name
        return hash(self._name_)

    @property
    def number(self) -> int:
        """The numeric gRPC code (``StatusCode.NOT_FOUND.number == 5``)."""
        number: int = self.value[0]
        return number

    @classmethod
    def of(cls, code: object) -> StatusCode:
        """The member for ``code``: a ``StatusCode``, a ``grpc.StatusCode``, a number or a name.

        Raises:
            ValueError: ``code`` names no status code.

        """
        if isinstance(code, StatusCode):
            return code
        if _is_grpc_status(code):
            return cls[code.name]  # type: ignore[attr-defined]
        if isinstance(code, int) and not isinstance(code, bool):
            for member in cls:
                if member.number == code:
                    return member
        if isinstance(code, str) and code in cls.__members__:
            return cls[code]
        raise ValueError(f"not a status code: {code!r}")

    def to_grpc(self) -> Any:
        """Return the ``grpc.StatusCode`` member of the same name.

        Raises:
            ModuleNotFoundError: ``grpcio`` is not installed.

        """
        grpc = importlib.import_module("grpc")  # optional: imported only when asked for
        return grpc.StatusCode[self.name]


def _is_grpc_status(value: object) -> bool:
    # grpc is never imported here: a value can only be one of its members if it already is
    grpc = sys.modules.get("grpc")
    status = getattr(grpc, "StatusCode", None) if grpc is not None else None
    return status is not None and isinstance(value, status)


class ErrorSubStatus(Enum):
    """Which Dex condition a ``DexServiceError``'s status code stands for."""

    UNCATEGORIZED = "uncategorized"
    FLOW_ALREADY_STARTED = "flow_already_started"
    FLOW_NOT_EXISTS = "flow_not_exists"
    WORKER_API_ERROR = "worker_api_error"
    LONG_POLL_TIMEOUT = "long_poll_timeout"
    CHANNEL_MESSAGE_NOT_FOUND = "channel_message_not_found"
    REQUEST_TIMEOUT = "request_timeout"
    FLOW_CLOSING = "flow_closing"


class FlowErrorType(Enum):
    """Why a Flow failed: the kind of the error a failed Flow reports."""

    STEP_DECISION_FAILED = "step_decision_failed"
    CLIENT_API_FAILED = "client_api_failed"
    WORKER_API_FAILED = "worker_api_failed"
    INVALID_USER_FLOW_CODE = "invalid_user_flow_code"
    INTERNAL = "internal"
    FLOW_TIMEOUT = "flow_timeout"


def _rebuild(cls: type[BaseException], args: tuple[Any, ...], state: dict[str, Any]) -> Any:
    exc = cls.__new__(cls)
    exc.args = args
    exc.__dict__.update(state)
    return exc


class DexError(RuntimeError):
    """Root of every exception the SDK raises (a ``RuntimeError``).

    Every SDK error pickles and copies with its attributes, whatever its constructor takes.
    """

    def __reduce__(self) -> tuple[Any, ...]:
        # the default calls cls(*args), which fails for constructors of several fields
        return (_rebuild, (type(self), self.args, dict(self.__dict__)))


class FlowDefinitionError(DexError):
    """A Flow, Step, RPC, schema or codec is invalid; raised when the Registry is built."""


_VALUE_OPERATIONS = {"encode": "Cannot encode Dex Value", "decode": "Cannot decode Dex Value"}


class ValueMappingError(DexError):
    """A value cannot be encoded to, or decoded from, its declared type.

    Attributes:
        operation: what failed, ``"encode"`` or ``"decode"`` (other text is kept as given).
        detail: what is wrong with the value.
    """

    def __init__(self, operation: str, detail: str) -> None:
        head = _VALUE_OPERATIONS.get(operation, f"Cannot {operation} Dex Value")
        super().__init__(f"{head}: {detail}")
        self.operation = operation
        self.detail = detail


class InvalidStepResultError(FlowDefinitionError):
    """A handler returned something other than the Wait or StepDecision it must return.

    Raised in a handler, it fails the attempt as invalid user code (not retried).

    Attributes:
        flow_type: the Flow whose handler returned it ("" when not known where raised).
        step_type: the Step, or None for an RPC (or when not known).
        method: ``"wait_for"``, ``"execute"`` or ``"rpc"``.
        detail: what is wrong with the result.
    """

    def __init__(
        self,
        flow_type: str,
        step_type: str | None,
        method: Literal["wait_for", "execute", "rpc"],
        detail: str,
    ) -> None:
        where = f"Flow {flow_type} " if flow_type else ""
        if method == "rpc":
            where = f"RPC in {where}" if where else "RPC "
        elif step_type is not None:
            where += f"Step {step_type} "
        super().__init__(f"{where}{method} returned an invalid result: {detail}")
        self.flow_type = flow_type
        self.step_type = step_type
        self.method = method
        self.detail = detail


class AttributeMapNotLoadedError(DexError):
    """An AttributeMap instance was read by a method or RPC that did not load it."""


class InvalidMapKeyError(DexError, ValueError):
    """An AttributeMap or ChannelMap instance key is not a non-empty string.

    Any non-empty string is a valid key, ``/`` included. Also a ``ValueError``, so code
    that validates its input with ``except ValueError`` catches it.
    """


class ChannelMessagesNotLoadedError(DexError):
    """Pending Channel messages were read by a method or RPC that did not load them."""


class PullRegistrationError(DexError):
    """The server refused to register a pull Worker's queue for good.

    Bad credentials or an invalid registration. Raised by ``Worker.start()`` when
    ``PullWorkerOptions.stop_on_permanent_stream_rejection`` is set, and recorded in
    ``pull_registration_state()``.

    Attributes:
        queue: the queue whose registration was refused.
        error: why (also the exception's ``__cause__``).
    """

    def __init__(self, queue: str, error: BaseException) -> None:
        super().__init__(f"pull Worker queue {queue!r} registration rejected: {error}")
        self.queue = queue
        self.error = error
        self.__cause__ = error


class InProcessServerNotFoundError(DexError, ConnectionError):
    """No embedded server runs in this process under a Worker's ``inproc://`` address.

    Raised by ``AsyncWorker.start()`` / ``Worker.start()`` when no
    ``dex_server.embedded.EmbeddedServer`` of that name runs in the process: start the
    embedded server first. A Worker that was connected and then lost its embedded server
    logs this error and retries with backoff, like after any lost connection. It is also a
    ``ConnectionError``.

    Attributes:
        address: the ``inproc://`` address asked for.
    """

    def __init__(self, address: str, running: list[str]) -> None:
        names = ", ".join(running) if running else "none"
        super().__init__(
            f"no embedded Dex server named {address!r} runs in this process (running: "
            f"{names}); start a dex_server.embedded.EmbeddedServer with that name first, "
            "or give the Worker a host:port address"
        )
        self.address = address


class ApiKeyExchangeError(DexError):
    """An ``ApiKeyCredential`` could not exchange its API key for a token.

    The message says which endpoint failed and why (HTTP status, the endpoint's ``error``
    and ``error_description``); the API key and tokens are redacted from it.
    """


class RetryAfterError(Exception):
    """Raised by a Step handler to fail the attempt and ask for the next one in ``after_seconds``.

    Build it with :func:`retry_after`. The attempt fails with ``cause`` (its type and message
    are what Dex records); the delay replaces the retry policy's backoff for this retry, and
    the policy's limits on attempts and total duration still apply.

    Attributes:
        after_seconds: the delay before the next attempt.
        cause: the failure this attempt reports.
    """

    def __init__(self, after_seconds: int, cause: BaseException) -> None:
        super().__init__(after_seconds, cause)  # args rebuild it: pickles as it is
        self.after_seconds = after_seconds
        self.cause = cause
        self.__cause__ = cause

    @property
    def retry_after_s(self) -> float:
        """``after_seconds`` as a float (what the Worker sends)."""
        return float(self.after_seconds)

    def __str__(self) -> str:
        return str(self.cause)

    def __repr__(self) -> str:
        return f"RetryAfterError(after_seconds={self.after_seconds!r}, cause={self.cause!r})"


def retry_after(after_seconds: int, cause: BaseException) -> RetryAfterError:
    """Return a :class:`RetryAfterError` for a handler to raise: retry in ``after_seconds``.

    Use it when a handler knows when a retry can succeed (a rate limit's reset, say)::

        except RateLimited as exc:
            raise dex.retry_after(30, exc) from exc

    Raises:
        ValueError: ``after_seconds`` is not positive.

    """
    if after_seconds <= 0:
        raise ValueError("after_seconds must be positive")
    return RetryAfterError(after_seconds, cause)


class DexServiceError(DexError):
    """The server rejected a request.

    Build one with the gRPC-style fields in the order ``(code, sub_status, detail,
    operation, flow_id)``; ``str(exc)`` is ``detail``.

    Attributes:
        code: the :class:`StatusCode` (equal to the ``grpc.StatusCode`` of the same name).
        sub_status: the :class:`ErrorSubStatus` of the Dex condition.
        detail: the server's message.
        operation: the Client or Worker call that failed (``"describe_flow"``, ...).
        flow_id: the Flow the request named, when there was one.
        error_code: the server's stable error code (``dex._protocol.ErrorCode``); by default
            the one of this class, or else derived from ``code``.
        retryable: whether the same request may succeed later; by default from
            ``error_code``.
    """

    # the error_code a class stands for, when built without one
    _default_error_code: ClassVar[str] = ErrorCode.INTERNAL

    def __init__(
        self,
        code: StatusCode,
        sub_status: ErrorSubStatus,
        detail: str,
        operation: str,
        flow_id: str | None,
        *,
        error_code: str | None = None,
        retryable: bool | None = None,
    ) -> None:
        super().__init__(detail)
        self.code = StatusCode.of(code)
        self.sub_status = ErrorSubStatus(sub_status)
        self.detail = detail
        self.operation = operation
        self.flow_id = flow_id
        if error_code is None:
            error_code = (
                self._default_error_code
                if type(self) is not DexServiceError
                else _ERROR_CODE_BY_STATUS.get(self.code, ErrorCode.INTERNAL)
            )
        self.error_code = error_code
        self.retryable = error_code in _RETRYABLE if retryable is None else retryable


class FlowAlreadyStartedError(DexServiceError):
    """A Flow with this ID exists and the ID reuse policy rejects another run."""

    _default_error_code = ErrorCode.FLOW_ALREADY_STARTED


class FlowNotFoundError(DexServiceError):
    """No Flow with this ID exists (or it was deleted after retention)."""

    _default_error_code = ErrorCode.FLOW_NOT_FOUND


class FlowNotActiveOrNotFoundError(DexServiceError):
    """The Flow is closed or missing, and the operation needs a running Flow."""

    _default_error_code = ErrorCode.FLOW_NOT_ACTIVE


class FlowClosingError(DexServiceError):
    """The Flow is closing; the request was rejected."""

    _default_error_code = ErrorCode.FLOW_CLOSING


class UnknownFlowTypeError(DexServiceError):
    """The Flow type or a Step type is not known to the server."""

    _default_error_code = ErrorCode.UNKNOWN_FLOW_TYPE


class WorkerInvocationError(DexServiceError):
    """An RPC handler raised on the Worker (or the Worker was lost during the call).

    Attributes:
        worker_code: the status the Worker reported (``UNKNOWN`` for an exception raised by
            the handler), or None when no Worker answered.
        worker_error_type: the type name of the handler's exception ("" when none).
        worker_error_detail: its message ("" when none).
        worker_stack_trace: its stack trace, when the server has one.
    """

    _default_error_code = ErrorCode.WORKER_API_ERROR

    def __init__(
        self,
        code: StatusCode,
        sub_status: ErrorSubStatus,
        detail: str,
        operation: str,
        flow_id: str | None,
        worker_code: StatusCode | None,
        worker_error_type: str,
        worker_error_detail: str,
        *,
        error_code: str | None = None,
        retryable: bool | None = None,
        worker_stack_trace: str | None = None,
    ) -> None:
        super().__init__(
            code,
            sub_status,
            detail,
            operation,
            flow_id,
            error_code=error_code,
            retryable=retryable,
        )
        self.worker_code = None if worker_code is None else StatusCode.of(worker_code)
        self.worker_error_type = worker_error_type
        self.worker_error_detail = worker_error_detail
        self.worker_stack_trace = worker_stack_trace


class NoWorkerAvailableError(DexServiceError):
    """No Worker serving this Flow type accepted the task in time."""

    _default_error_code = ErrorCode.NO_WORKER_AVAILABLE


class RpcLockConflictError(DexServiceError):
    """An RPC asked for an Attribute lock that a Step or another RPC holds. Retry later."""

    _default_error_code = ErrorCode.RPC_LOCK_CONFLICT


class LongPollTimeoutError(DexServiceError):
    """A long poll ended before its event happened. Call again."""

    _default_error_code = ErrorCode.LONG_POLL_TIMEOUT


class RequestTimeoutError(DexServiceError):
    """The request took longer than its timeout."""

    _default_error_code = ErrorCode.REQUEST_TIMEOUT


class ChannelMessageNotFoundError(DexServiceError):
    """A transactional RPC deleted a Channel message that is not pending."""

    _default_error_code = ErrorCode.CHANNEL_MESSAGE_NOT_FOUND


class LimitExceededError(DexServiceError):
    """A size or count limit was exceeded; the message names the limit."""

    _default_error_code = ErrorCode.LIMIT_EXCEEDED


class UnauthenticatedError(DexServiceError):
    """The server requires a token and none (or a wrong one) was presented."""

    _default_error_code = ErrorCode.UNAUTHENTICATED


class BadRequestError(DexServiceError):
    """The request was malformed or named something that does not exist."""

    _default_error_code = ErrorCode.BAD_REQUEST


class ServiceUnavailableError(DexServiceError):
    """The server or its store is temporarily unavailable. Retry later."""

    _default_error_code = ErrorCode.UNAVAILABLE


class StepExecutionNotFoundError(DexServiceError):
    """The Flow's latest run has no Step execution with that ``StepExecutionId`` (yet).

    Raised by ``wait_for_step_completion`` and ``skip_timer``: the Step type never ran
    that many times in the run. Status NOT_FOUND.
    """

    _default_error_code = ErrorCode.STEP_EXECUTION_NOT_FOUND


class TimerNotFoundError(DexServiceError):
    """``skip_timer`` named a timer the execution's Wait does not have (status NOT_FOUND).

    Also raised while the execution is not parked on a Wait yet (its ``wait_for`` runs).
    """

    _default_error_code = ErrorCode.TIMER_NOT_FOUND


class TimerNotPendingError(DexServiceError):
    """``skip_timer`` named a timer that already fired or was skipped (FAILED_PRECONDITION)."""

    _default_error_code = ErrorCode.TIMER_NOT_PENDING


_RETRYABLE = frozenset(
    {
        ErrorCode.RPC_LOCK_CONFLICT,
        ErrorCode.LONG_POLL_TIMEOUT,
        ErrorCode.REQUEST_TIMEOUT,
        ErrorCode.UNAVAILABLE,
    }
)

# error code -> (exception class, status code, sub-status)
_BY_CODE: dict[str, tuple[type[DexServiceError], StatusCode, ErrorSubStatus]] = {
    ErrorCode.FLOW_ALREADY_STARTED: (
        FlowAlreadyStartedError,
        StatusCode.ALREADY_EXISTS,
        ErrorSubStatus.FLOW_ALREADY_STARTED,
    ),
    ErrorCode.FLOW_NOT_FOUND: (
        FlowNotFoundError,
        StatusCode.NOT_FOUND,
        ErrorSubStatus.FLOW_NOT_EXISTS,
    ),
    ErrorCode.FLOW_NOT_ACTIVE: (
        FlowNotActiveOrNotFoundError,
        StatusCode.FAILED_PRECONDITION,
        ErrorSubStatus.FLOW_NOT_EXISTS,
    ),
    ErrorCode.FLOW_CLOSING: (
        FlowClosingError,
        StatusCode.FAILED_PRECONDITION,
        ErrorSubStatus.FLOW_CLOSING,
    ),
    ErrorCode.UNKNOWN_FLOW_TYPE: (
        UnknownFlowTypeError,
        StatusCode.INVALID_ARGUMENT,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.UNKNOWN_RPC: (
        BadRequestError,
        StatusCode.INVALID_ARGUMENT,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.WORKER_API_ERROR: (
        WorkerInvocationError,
        StatusCode.FAILED_PRECONDITION,
        ErrorSubStatus.WORKER_API_ERROR,
    ),
    ErrorCode.NO_WORKER_AVAILABLE: (
        NoWorkerAvailableError,
        StatusCode.UNAVAILABLE,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.RPC_LOCK_CONFLICT: (
        RpcLockConflictError,
        StatusCode.ABORTED,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.LONG_POLL_TIMEOUT: (
        LongPollTimeoutError,
        StatusCode.DEADLINE_EXCEEDED,
        ErrorSubStatus.LONG_POLL_TIMEOUT,
    ),
    ErrorCode.REQUEST_TIMEOUT: (
        RequestTimeoutError,
        StatusCode.DEADLINE_EXCEEDED,
        ErrorSubStatus.REQUEST_TIMEOUT,
    ),
    ErrorCode.CHANNEL_MESSAGE_NOT_FOUND: (
        ChannelMessageNotFoundError,
        StatusCode.NOT_FOUND,
        ErrorSubStatus.CHANNEL_MESSAGE_NOT_FOUND,
    ),
    ErrorCode.LIMIT_EXCEEDED: (
        LimitExceededError,
        StatusCode.RESOURCE_EXHAUSTED,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.UNAUTHENTICATED: (
        UnauthenticatedError,
        StatusCode.UNAUTHENTICATED,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.BAD_REQUEST: (
        BadRequestError,
        StatusCode.INVALID_ARGUMENT,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.UNAVAILABLE: (
        ServiceUnavailableError,
        StatusCode.UNAVAILABLE,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.INTERNAL: (DexServiceError, StatusCode.INTERNAL, ErrorSubStatus.UNCATEGORIZED),
    ErrorCode.STEP_EXECUTION_NOT_FOUND: (
        StepExecutionNotFoundError,
        StatusCode.NOT_FOUND,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.TIMER_NOT_FOUND: (
        TimerNotFoundError,
        StatusCode.NOT_FOUND,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.TIMER_NOT_PENDING: (
        TimerNotPendingError,
        StatusCode.FAILED_PRECONDITION,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    ErrorCode.NOT_FOUND: (DexServiceError, StatusCode.NOT_FOUND, ErrorSubStatus.UNCATEGORIZED),
    ErrorCode.METHOD_NOT_ALLOWED: (
        DexServiceError,
        StatusCode.UNIMPLEMENTED,
        ErrorSubStatus.UNCATEGORIZED,
    ),
    # the transport raises FeatureNotAvailableError for it; this is the status it stands for
    ErrorCode.FEATURE_NOT_AVAILABLE: (
        DexServiceError,
        StatusCode.UNIMPLEMENTED,
        ErrorSubStatus.UNCATEGORIZED,
    ),
}

# a plain DexServiceError built from a status alone gets the closest error code
_ERROR_CODE_BY_STATUS: dict[StatusCode, str] = {
    StatusCode.ALREADY_EXISTS: ErrorCode.FLOW_ALREADY_STARTED,
    StatusCode.NOT_FOUND: ErrorCode.FLOW_NOT_FOUND,
    StatusCode.FAILED_PRECONDITION: ErrorCode.FLOW_NOT_ACTIVE,
    StatusCode.ABORTED: ErrorCode.RPC_LOCK_CONFLICT,
    StatusCode.DEADLINE_EXCEEDED: ErrorCode.REQUEST_TIMEOUT,
    StatusCode.RESOURCE_EXHAUSTED: ErrorCode.LIMIT_EXCEEDED,
    StatusCode.UNAUTHENTICATED: ErrorCode.UNAUTHENTICATED,
    StatusCode.PERMISSION_DENIED: ErrorCode.UNAUTHENTICATED,
    StatusCode.INVALID_ARGUMENT: ErrorCode.BAD_REQUEST,
    StatusCode.UNAVAILABLE: ErrorCode.UNAVAILABLE,
}


def status_of(error_code: str) -> tuple[StatusCode, ErrorSubStatus]:
    """The gRPC-style status pair for a server error code (``UNKNOWN`` for unknown codes)."""
    entry = _BY_CODE.get(error_code)
    if entry is None:
        return StatusCode.UNKNOWN, ErrorSubStatus.UNCATEGORIZED
    return entry[1], entry[2]


def error_from_code(
    code: str,
    message: str,
    *,
    operation: str = "",
    detail: str | None = None,
    flow_id: str | None = None,
    retryable: bool | None = None,
    worker_error_type: str | None = None,
    worker_error_detail: str | None = None,
) -> DexServiceError:
    """Build the exception for the server error code ``code`` (``dex._protocol.ErrorCode``).

    ``message`` becomes ``detail`` (and ``str(exc)``); the server's extra ``detail`` text is
    the stack trace of a ``WorkerInvocationError`` and is appended to the message of others.
    An unknown ``code`` gives a plain ``DexServiceError`` with status ``UNKNOWN``.
    """
    cls, status, sub_status = _BY_CODE.get(
        code, (DexServiceError, StatusCode.UNKNOWN, ErrorSubStatus.UNCATEGORIZED)
    )
    if cls is WorkerInvocationError:
        handler_raised = worker_error_type is not None
        return WorkerInvocationError(
            status,
            sub_status,
            message,
            operation,
            flow_id,
            StatusCode.UNKNOWN if handler_raised else None,
            worker_error_type or "",
            worker_error_detail or "",
            error_code=code,
            retryable=retryable,
            worker_stack_trace=detail,
        )
    if detail:
        message = f"{message}: {detail}"
    return cls(
        status, sub_status, message, operation, flow_id, error_code=code, retryable=retryable
    )


class FeatureNotAvailableError(DexError, NotImplementedError):
    """A part of the Dex model that this release accepts by name but does not run yet.

    The names and option shapes exist so that code written for the full model imports and
    type-checks; calling into such a feature raises this error at once, before anything is
    sent to the server. ``feature`` names what was used (for example
    ``"time travel (time_travel)"``). Also a ``NotImplementedError`` (and so a
    ``RuntimeError``).
    """

    def __init__(self, feature: str) -> None:
        super().__init__(f"{feature} is not available in this release of Dex for Python")
        self.feature = feature


def feature_not_available(feature: str) -> NoReturn:
    """Raise :class:`FeatureNotAvailableError` for ``feature`` (a helper for SDK internals)."""
    raise FeatureNotAvailableError(feature)
