"""The error tree: bases, constructor shapes, attributes and status-code comparisons."""

from __future__ import annotations

import copy
import enum
import pickle
import sys
import types
from collections.abc import Iterator
from typing import cast

import dex
import pytest
from dex import errors
from dex._invoke import error_info
from dex._protocol import ErrorCode
from dex.errors import (
    ChannelMessageNotFoundError,
    DexServiceError,
    ErrorSubStatus,
    FlowAlreadyStartedError,
    FlowDefinitionError,
    FlowNotFoundError,
    InvalidStepResultError,
    PullRegistrationError,
    RetryAfterError,
    RpcLockConflictError,
    StatusCode,
    ValueMappingError,
    WorkerInvocationError,
    error_from_code,
    retry_after,
)

from .unit_support import task

S = StatusCode
U = ErrorSubStatus

SERVICE_ERRORS = [
    cls
    for cls in vars(errors).values()
    if isinstance(cls, type) and issubclass(cls, DexServiceError)
]
SDK_ERRORS = [
    cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, dex.DexError)
]


# --------------------------------------------------------------------------- bases


@pytest.mark.parametrize("cls", SDK_ERRORS, ids=lambda c: c.__name__)
def test_every_sdk_error_is_a_runtime_error(cls: type[Exception]) -> None:
    assert issubclass(cls, RuntimeError)


def test_the_tree_keeps_the_narrower_bases() -> None:
    assert issubclass(InvalidStepResultError, FlowDefinitionError)
    assert issubclass(dex.InvalidMapKeyError, ValueError)
    assert issubclass(dex.FeatureNotAvailableError, NotImplementedError)
    assert issubclass(FlowNotFoundError, DexServiceError)
    assert issubclass(dex.ApiKeyExchangeError, dex.DexError)
    assert issubclass(PullRegistrationError, dex.DexError)
    # raised by user code to steer the retry, not an SDK failure
    assert issubclass(RetryAfterError, Exception)
    assert not issubclass(RetryAfterError, dex.DexError)


# --------------------------------------------------------------------------- constructors


@pytest.mark.parametrize("cls", SERVICE_ERRORS, ids=lambda c: c.__name__)
def test_service_errors_take_the_status_fields_positionally(cls: type[DexServiceError]) -> None:
    extra: tuple[object, ...] = ()
    if cls is WorkerInvocationError:
        extra = (None, "", "")
    error = cls(S.NOT_FOUND, U.FLOW_NOT_EXISTS, "no such flow", "describe_flow", "f-1", *extra)
    assert error.code is S.NOT_FOUND
    assert error.sub_status is U.FLOW_NOT_EXISTS
    assert error.detail == "no such flow" == str(error)
    assert error.operation == "describe_flow"
    assert error.flow_id == "f-1"
    assert error.args == ("no such flow",)


def test_service_errors_take_keywords_and_derive_error_code_and_retryable() -> None:
    conflict = RpcLockConflictError(
        code=S.ABORTED, sub_status=U.UNCATEGORIZED, detail="held", operation="x", flow_id=None
    )
    assert conflict.error_code == ErrorCode.RPC_LOCK_CONFLICT and conflict.retryable
    started = FlowAlreadyStartedError(S.ALREADY_EXISTS, U.FLOW_ALREADY_STARTED, "d", "o", "f")
    assert started.error_code == ErrorCode.FLOW_ALREADY_STARTED and not started.retryable
    # a plain DexServiceError takes the closest code of its status
    plain = DexServiceError(S.UNAVAILABLE, U.UNCATEGORIZED, "down", "health_check", None)
    assert plain.error_code == ErrorCode.UNAVAILABLE and plain.retryable
    unknown = DexServiceError(S.DATA_LOSS, U.UNCATEGORIZED, "lost", "x", None)
    assert unknown.error_code == ErrorCode.INTERNAL and not unknown.retryable
    forced = ChannelMessageNotFoundError(
        S.NOT_FOUND, U.CHANNEL_MESSAGE_NOT_FOUND, "d", "o", None, error_code="X", retryable=True
    )
    assert (forced.error_code, forced.retryable) == ("X", True)


def test_worker_invocation_error_carries_the_handler_failure() -> None:
    error = WorkerInvocationError(
        S.FAILED_PRECONDITION,
        U.WORKER_API_ERROR,
        "RPC failed",
        "invoke_rpc",
        "f-1",
        S.INVALID_ARGUMENT,
        "ValueError",
        "bad input",
    )
    assert error.worker_code is S.INVALID_ARGUMENT
    assert (error.worker_error_type, error.worker_error_detail) == ("ValueError", "bad input")
    assert error.worker_stack_trace is None
    assert error.error_code == ErrorCode.WORKER_API_ERROR
    lost = WorkerInvocationError(
        S.UNKNOWN, U.WORKER_API_ERROR, "lost", "invoke_rpc", None, None, "", ""
    )
    assert lost.worker_code is None


def test_value_mapping_error_names_the_operation() -> None:
    error = ValueMappingError("encode", "expected int, got str")
    assert (error.operation, error.detail) == ("encode", "expected int, got str")
    assert str(error) == "Cannot encode Dex Value: expected int, got str"
    assert str(ValueMappingError("decode", "x")) == "Cannot decode Dex Value: x"
    with pytest.raises(TypeError):
        ValueMappingError("only a message")  # type: ignore[call-arg]


def test_invalid_step_result_error_names_where() -> None:
    error = InvalidStepResultError("Order", "Pay", "execute", "returned 3")
    assert (error.flow_type, error.step_type, error.method, error.detail) == (
        "Order",
        "Pay",
        "execute",
        "returned 3",
    )
    assert str(error) == "Flow Order Step Pay execute returned an invalid result: returned 3"
    rpc_error = InvalidStepResultError("Order", None, "rpc", "bad movement")
    assert str(rpc_error) == "RPC in Flow Order rpc returned an invalid result: bad movement"
    # raised inside a handler, before the Flow is known
    bare = InvalidStepResultError("", None, "execute", "no movement")
    assert str(bare) == "execute returned an invalid result: no movement"


def test_pull_registration_error_keeps_queue_and_cause() -> None:
    cause = ConnectionError("refused")
    error = PullRegistrationError("orders", cause)
    assert (error.queue, error.error) == ("orders", cause)
    assert error.__cause__ is cause
    assert str(error) == "pull Worker queue 'orders' registration rejected: refused"


def _examples() -> list[BaseException]:
    return [
        FlowNotFoundError(S.NOT_FOUND, U.FLOW_NOT_EXISTS, "gone", "describe_flow", "f-1"),
        WorkerInvocationError(
            S.FAILED_PRECONDITION, U.WORKER_API_ERROR, "d", "invoke_rpc", "f", S.UNKNOWN, "E", "m"
        ),
        ValueMappingError("decode", "bad"),
        InvalidStepResultError("F", "S", "wait_for", "junk"),
        PullRegistrationError("q", ValueError("no")),
        dex.FeatureNotAvailableError("SubFlows"),
        dex.InvalidMapKeyError("empty key"),
        RetryAfterError(3, KeyError("k")),
    ]


@pytest.mark.parametrize("error", _examples(), ids=lambda e: type(e).__name__)
def test_errors_pickle_and_copy_with_their_attributes(error: BaseException) -> None:
    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error)):
        assert type(clone) is type(error)
        assert str(clone) == str(error)
        assert repr(clone.args) == repr(error.args)
        assert {k: repr(v) for k, v in vars(clone).items()} == {
            k: repr(v) for k, v in vars(error).items()
        }


def test_retry_after_builds_the_error_and_rejects_non_positive_delays() -> None:
    cause = TimeoutError("rate limited")
    error = retry_after(30, cause)
    assert isinstance(error, RetryAfterError)
    assert (error.after_seconds, error.cause, error.retry_after_s) == (30, cause, 30.0)
    assert str(error) == "rate limited"
    assert error.__cause__ is cause
    assert RetryAfterError(0, cause).after_seconds == 0  # the class itself does not check
    for bad in (0, -1):
        with pytest.raises(ValueError, match="after_seconds must be positive"):
            retry_after(bad, cause)
    assert dex.retry_after is retry_after


def test_a_retry_after_failure_reports_the_cause_and_the_delay() -> None:
    try:
        raise retry_after(5, KeyError("quota"))
    except RetryAfterError as exc:
        info = error_info(exc)
    assert info.error_type == "KeyError"
    assert info.message == "'quota'"
    assert info.retry_after_s == 5.0
    assert info.stack is not None and "KeyError" in info.stack
    assert not info.non_retryable


def test_an_invalid_result_is_a_non_retryable_failure() -> None:
    info = error_info(InvalidStepResultError("F", "S", "execute", "junk"))
    assert info.non_retryable and info.error_type == "InvalidStepResultError"


# --------------------------------------------------------------------------- status codes


def test_status_codes_mirror_grpc_numbers_and_names() -> None:
    assert [c.number for c in StatusCode] == list(range(17))
    assert StatusCode.NOT_FOUND.value == (5, "not found")
    assert StatusCode.of(5) is StatusCode.NOT_FOUND
    assert StatusCode.of("UNAVAILABLE") is StatusCode.UNAVAILABLE
    assert StatusCode.of(StatusCode.ABORTED) is StatusCode.ABORTED
    assert str(StatusCode.UNAVAILABLE) == "StatusCode.UNAVAILABLE"
    for bad in (17, "NOPE", True, None):
        with pytest.raises(ValueError, match="not a status code"):
            StatusCode.of(bad)
    assert StatusCode.NOT_FOUND != 5  # an Enum, as grpc's: no equality with bare numbers
    assert StatusCode.NOT_FOUND != StatusCode.ALREADY_EXISTS


class _FakeGrpcStatus(enum.Enum):
    """Stands in for ``grpc.StatusCode`` (grpcio is not a dependency)."""

    OK = (0, "ok")
    NOT_FOUND = (5, "not found")
    UNAVAILABLE = (14, "unavailable")


@pytest.fixture
def fake_grpc(monkeypatch: pytest.MonkeyPatch) -> Iterator[types.ModuleType]:
    module = types.ModuleType("grpc")
    module.StatusCode = _FakeGrpcStatus  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "grpc", module)
    yield module


def test_status_codes_compare_equal_to_grpc_members(fake_grpc: types.ModuleType) -> None:
    grpc_code = _FakeGrpcStatus.NOT_FOUND
    assert StatusCode.NOT_FOUND == grpc_code
    assert grpc_code == StatusCode.NOT_FOUND
    assert StatusCode.NOT_FOUND != _FakeGrpcStatus.UNAVAILABLE
    assert grpc_code in {StatusCode.NOT_FOUND}
    by_grpc_code: dict[object, str] = {grpc_code: "missing"}
    assert by_grpc_code[StatusCode.NOT_FOUND] == "missing"
    assert StatusCode.of(grpc_code) is StatusCode.NOT_FOUND
    assert StatusCode.UNAVAILABLE.to_grpc() is _FakeGrpcStatus.UNAVAILABLE


def test_service_errors_accept_grpc_status_codes(fake_grpc: types.ModuleType) -> None:
    error = FlowNotFoundError(
        _FakeGrpcStatus.NOT_FOUND,  # type: ignore[arg-type]
        U.FLOW_NOT_EXISTS,
        "gone",
        "describe_flow",
        "f",
    )
    assert error.code == _FakeGrpcStatus.NOT_FOUND
    assert error.code is StatusCode.NOT_FOUND


def test_without_grpc_no_enum_looks_like_a_grpc_status(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "grpc", raising=False)
    assert StatusCode.NOT_FOUND != cast(object, _FakeGrpcStatus.NOT_FOUND)
    with pytest.raises(ValueError):
        StatusCode.of(_FakeGrpcStatus.NOT_FOUND)


# --------------------------------------------------------------------------- server codes


@pytest.mark.parametrize(
    "code", [v for k, v in vars(ErrorCode).items() if k.isupper()], ids=lambda c: str(c)
)
def test_every_server_code_has_a_class_and_a_status(code: str) -> None:
    error = error_from_code(code, "boom", operation="op", flow_id="f")
    assert error.error_code == code
    assert (str(error), error.operation, error.flow_id) == ("boom", "op", "f")
    assert error.code is not StatusCode.UNKNOWN
    assert error.code is not StatusCode.OK
    expected = errors.status_of(code)
    assert (error.code, error.sub_status) == expected


def test_an_unknown_server_code_is_a_plain_service_error() -> None:
    error = error_from_code("SOMETHING_NEW", "new", detail="more")
    assert type(error) is DexServiceError
    assert (error.code, error.sub_status) == (S.UNKNOWN, U.UNCATEGORIZED)
    assert str(error) == "new: more"


async def test_an_invalid_result_raised_by_invoke_names_flow_step_and_method() -> None:
    from .test_unit_invoke import run

    res = await run(task("execute", "ReturnsJunk"))
    assert res.error is not None
    assert res.error.message.startswith(
        "Flow Demo Step ReturnsJunk execute returned an invalid result: "
    )
