"""Results of Client calls: Flow status, info, results, search pages and Stream messages."""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar, overload

from dex._codec import WireCodec as Codec
from dex._codec import codec_for
from dex._flow_config import FlowConfig, config_from_wire
from dex._protocol import FlowInfoWire, FlowResultWire, StreamMessageWire
from dex.errors import FlowErrorType as FlowErrorType

T = TypeVar("T")


class FlowStatus(enum.Enum):
    """Lifecycle status of a Flow run; only ``RUNNING`` is open.

    ``CONTINUED_AS_NEW`` (a run that handed over to a new one) and
    ``SERVER_SIDE_TIMEOUT_INTERNAL_ONLY`` exist for completeness; this release's server
    reports neither.
    """

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TERMINATED = "terminated"
    SERVER_SIDE_TIMEOUT_INTERNAL_ONLY = "server_side_timeout_internal_only"
    CONTINUED_AS_NEW = "continued_as_new"

    @property
    def is_closed(self) -> bool:
        """Whether the run has ended."""
        return self is not FlowStatus.RUNNING


_ERROR_TYPE_BY_CODE = {
    "STEP_DECISION_FAILING_FLOW": FlowErrorType.STEP_DECISION_FAILED,
    "CLIENT_API_FAILING_FLOW": FlowErrorType.CLIENT_API_FAILED,
    "WORKER_API_FAIL": FlowErrorType.WORKER_API_FAILED,
    "INVALID_USER_FLOW_CODE": FlowErrorType.INVALID_USER_FLOW_CODE,
    "FLOW_TIMEOUT": FlowErrorType.FLOW_TIMEOUT,
}


def error_type_of(code: str | None) -> FlowErrorType | None:
    """``FlowErrorType`` of a server failure code (None stays None)."""
    if code is None:
        return None
    return _ERROR_TYPE_BY_CODE.get(code, FlowErrorType.INTERNAL)


def _time(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


@dataclass(frozen=True)
class FlowInfo:
    """What ``describe_flow`` / ``list_flows`` say about a Flow's latest run.

    Attributes:
        flow_id: the Flow ID.
        run_id: the latest run's ID.
        flow_type: the Flow type name.
        status: the run's status.
        started_at: when the run started (UTC).
        closed_at: when it closed (UTC), None while running (keyword only).
        config: the run's ``FlowConfig`` as started and updated (None: never set).
        timeout_at: the run's soft-timeout deadline (UTC), None without a timeout.

    """

    flow_id: str
    run_id: str
    flow_type: str
    status: FlowStatus
    started_at: datetime
    _: dataclasses.KW_ONLY
    closed_at: datetime | None = None
    config: FlowConfig | None = None
    timeout_at: datetime | None = None

    @classmethod
    def from_wire(cls, wire: FlowInfoWire) -> FlowInfo:
        """Build from the server's ``FlowInfoWire``."""
        started = _time(wire.started_at)
        assert started is not None
        return cls(
            wire.flow_id,
            wire.run_id,
            wire.flow_type,
            FlowStatus(wire.status),
            started,
            closed_at=_time(wire.closed_at),
            config=None if wire.config is None else config_from_wire(wire.config),
            timeout_at=_time(wire.timeout_at),
        )


class StepCompletion:
    """One Step that closed the Flow with an output, as ``FlowResult.completions`` lists it.

    Built by the Client from the server's answer: ``completion`` is any record with
    ``step_type``, ``step_execution_id`` and the raw JSON ``output`` (bytes, or None)
    such as the wire's ``CompletionWire``; ``decoder`` maps a type to its ``Codec`` (a
    callable such as ``Registry.codec_for``, so custom codecs apply; None uses the
    built-in codecs).

    Attributes:
        step_type: the Step type.
        step_execution_id: its execution ID (``"<StepType>-<n>"``).
        output: the raw canonical JSON output, None when the Step gave none.

    """

    __slots__ = ("_codec_for", "_output", "_step_execution_id", "_step_type")

    def __init__(self, completion: Any, decoder: Any = None) -> None:
        self._step_type: str = completion.step_type
        self._step_execution_id: str = completion.step_execution_id
        output = completion.output
        self._output = None if output is None else bytes(output)
        self._codec_for: Callable[[object], Codec] = decoder if decoder is not None else codec_for

    @property
    def step_type(self) -> str:
        """The Step type."""
        return self._step_type

    @property
    def step_execution_id(self) -> str:
        """The Step's execution ID (``"<StepType>-<n>"``)."""
        return self._step_execution_id

    @property
    def output(self) -> bytes | None:
        """The raw canonical JSON output, None when the Step gave none."""
        return self._output

    @overload
    def decode(self, output_type: type[T]) -> T: ...
    @overload
    def decode(self, output_type: object) -> Any: ...
    def decode(self, output_type: object) -> Any:
        """Decode the output as ``output_type`` (``ValueMappingError`` on a mismatch)."""
        data = self._output if self._output is not None else b"null"
        return self._codec_for(output_type).decode(data)

    @overload
    def output_as(self, output_type: type[T]) -> T: ...
    @overload
    def output_as(self, output_type: object) -> Any: ...
    def output_as(self, output_type: object) -> Any:
        """Same as ``decode``."""
        return self.decode(output_type)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StepCompletion):
            return NotImplemented
        return (self._step_type, self._step_execution_id, self._output) == (
            other._step_type,
            other._step_execution_id,
            other._output,
        )

    def __hash__(self) -> int:
        return hash((self._step_type, self._step_execution_id, self._output))

    def __repr__(self) -> str:
        return (
            f"StepCompletion(step_type={self._step_type!r}, "
            f"step_execution_id={self._step_execution_id!r}, output={self._output!r})"
        )


FlowCompletion = StepCompletion
"""Former name of ``StepCompletion``."""


@dataclass(frozen=True)
class FlowResult:
    """How a Flow ended (``wait_for_flow``).

    Attributes:
        status: the closed status.
        completions: every Step that closed the Flow with an output, in server order
            (kept as a tuple).
        error_type: for FAILED, why (a ``FlowErrorType``); else None.
        error_message: human-readable failure reason, or None.
        error_code: the server's own failure code, finer than ``error_type`` (e.g.
            ``"WORKER_API_FAIL"``, ``"DUPLICATE_RUN"``); None without one. Keyword only.

    """

    status: FlowStatus
    completions: Sequence[StepCompletion]
    error_type: FlowErrorType | None = None
    error_message: str | None = None
    _: dataclasses.KW_ONLY
    error_code: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "completions", tuple(self.completions))

    @property
    def is_terminal(self) -> bool:
        """Whether the Flow is over: closed, and not handed over to a new run."""
        return self.status not in (FlowStatus.RUNNING, FlowStatus.CONTINUED_AS_NEW)

    @overload
    def single_output(self, output_type: type[T]) -> T: ...
    @overload
    def single_output(self, output_type: object) -> Any: ...
    def single_output(self, output_type: object) -> Any:
        """Decode the one completion output as ``output_type``.

        Raises:
            ValueError: there is not exactly one completion.
            ValueMappingError: the output does not match ``output_type``.

        """
        if len(self.completions) != 1:
            raise ValueError(
                f"expected exactly one completion output, the Flow has {len(self.completions)}"
            )
        return self.completions[0].decode(output_type)

    @classmethod
    def from_wire(
        cls, wire: FlowResultWire, decoder: Callable[[object], Codec] | None = None
    ) -> FlowResult:
        """Build from the server's ``FlowResultWire``; ``decoder`` as in ``StepCompletion``."""
        return cls(
            FlowStatus(wire.status),
            [StepCompletion(c, decoder) for c in wire.completions],
            error_type_of(wire.error_type),
            wire.error_message,
            error_code=wire.error_type,
        )


@dataclass(frozen=True)
class StreamMessage(Generic[T]):
    """One Stream message.

    Attributes:
        value: the decoded value (the Stream's declared type).
        resume_token: pass it to ``read_stream`` to get the message after this one.
        created_time: when the server appended it (UTC).
        source: ``"#<stepExecutionId>"`` for Step writes, the Client's source otherwise.

    """

    value: T
    resume_token: str
    created_time: datetime
    source: str

    @classmethod
    def from_wire(cls, wire: StreamMessageWire, value: T) -> StreamMessage[T]:
        """Build from the wire message and its already decoded value."""
        created = _time(wire.created_time)
        assert created is not None
        return cls(value, wire.resume_token, created, wire.source)


@dataclass(frozen=True)
class StreamMessagesPage(Generic[T]):
    """A newest-first page of ``list_stream_messages``.

    Attributes:
        messages: the page's messages, newest first.
        next_page_token: pass it as ``before_page_token`` for the older page; ``""`` when
            there is none.

    """

    messages: Sequence[StreamMessage[T]]
    next_page_token: str

    @property
    def before_page_token(self) -> str | None:
        """``next_page_token``, or None when there is no older page."""
        return self.next_page_token or None


@dataclass(frozen=True)
class FlowListPage:
    """A newest-first page of ``list_flows``; pass ``next_page_token`` for the next one."""

    flows: tuple[FlowInfo, ...]
    next_page_token: str | None = None


@dataclass(frozen=True)
class HealthInfo:
    """A health report: the ``condition`` of ``hostname``, held for ``duration_seconds``."""

    condition: str
    hostname: str
    duration_seconds: int


@dataclass(frozen=True)
class SearchFlowEntry:
    """One Flow found by ``search_flows``, with its indexed Attribute values."""

    flow_id: str
    run_id: str
    flow_type: str
    status: FlowStatus
    started_at: datetime
    closed_at: datetime | None
    indexed_attributes: Mapping[str, Any]


@dataclass(frozen=True)
class SearchFlowsPage:
    """One page of ``search_flows``; pass ``next_page_token`` for the next (``""``: last)."""

    flows: Sequence[SearchFlowEntry]
    next_page_token: str
