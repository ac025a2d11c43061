"""Results of Client calls: Flow status, info, results and Stream messages."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar, overload

from dex._codec import codec_for
from dex._protocol import FlowInfoWire, FlowResultWire, StreamMessageWire

T = TypeVar("T")


class FlowStatus(enum.Enum):
    """Lifecycle status of a Flow run; only ``RUNNING`` is open."""

    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"
    TERMINATED = "terminated"

    @property
    def is_closed(self) -> bool:
        """Whether the run has ended."""
        return self is not FlowStatus.RUNNING


def _time(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


@dataclass(frozen=True, kw_only=True)
class FlowInfo:
    """What ``describe_flow`` / ``list_flows`` say about a Flow's latest run.

    Attributes:
        flow_id: the Flow ID.
        run_id: the latest run's ID.
        flow_type: the Flow type name.
        status: the run's status.
        started_at: when the run started (UTC).
        closed_at: when it closed (UTC), None while running.

    """

    flow_id: str
    run_id: str
    flow_type: str
    status: FlowStatus
    started_at: datetime
    closed_at: datetime | None = None

    @classmethod
    def from_wire(cls, wire: FlowInfoWire) -> FlowInfo:
        """Build from the server's ``FlowInfoWire``."""
        started = _time(wire.started_at)
        assert started is not None
        return cls(
            flow_id=wire.flow_id,
            run_id=wire.run_id,
            flow_type=wire.flow_type,
            status=FlowStatus(wire.status),
            started_at=started,
            closed_at=_time(wire.closed_at),
        )


@dataclass(frozen=True, kw_only=True)
class FlowCompletion:
    """One Step that closed the Flow with an output (raw canonical JSON, None if absent)."""

    step_type: str
    step_execution_id: str
    output: bytes | None = None

    @overload
    def output_as(self, tp: type[T]) -> T: ...
    @overload
    def output_as(self, tp: object) -> Any: ...
    def output_as(self, tp: object) -> Any:
        """Decode the output as ``tp`` (``ValueMappingError`` on a mismatch)."""
        data = self.output if self.output is not None else b"null"
        return codec_for(tp).decode(data)


@dataclass(frozen=True, kw_only=True)
class FlowResult:
    """How a Flow ended (``wait_for_flow``).

    Attributes:
        status: the closed status.
        error_type: for FAILED: e.g. ``STEP_DECISION_FAILING_FLOW``, ``WORKER_API_FAIL``,
            ``CLIENT_API_FAILING_FLOW``, ``INVALID_USER_FLOW_CODE``; else None.
        error_message: human-readable failure reason, or None.
        completions: every Step that closed the Flow with an output, in server order.

    """

    status: FlowStatus
    error_type: str | None = None
    error_message: str | None = None
    completions: tuple[FlowCompletion, ...] = ()

    @overload
    def single_output(self, tp: type[T]) -> T: ...
    @overload
    def single_output(self, tp: object) -> Any: ...
    def single_output(self, tp: object) -> Any:
        """Decode the one completion output as ``tp``.

        Raises:
            ValueError: there is not exactly one completion.
            ValueMappingError: the output does not match ``tp``.

        """
        if len(self.completions) != 1:
            raise ValueError(
                f"expected exactly one completion output, the Flow has {len(self.completions)}"
            )
        return self.completions[0].output_as(tp)

    @classmethod
    def from_wire(cls, wire: FlowResultWire) -> FlowResult:
        """Build from the server's ``FlowResultWire``."""
        return cls(
            status=FlowStatus(wire.status),
            error_type=wire.error_type,
            error_message=wire.error_message,
            completions=tuple(
                FlowCompletion(
                    step_type=c.step_type,
                    step_execution_id=c.step_execution_id,
                    output=None if c.output is None else bytes(c.output),
                )
                for c in wire.completions
            ),
        )


@dataclass(frozen=True, kw_only=True)
class StreamMessage:
    """One Stream message.

    Attributes:
        value: the decoded value (the Stream's declared type).
        resume_token: pass it to ``read_stream`` to get the message after this one.
        created_time: when the server appended it (UTC).
        source: ``"#<stepExecutionId>"`` for Step writes, the Client's source otherwise.

    """

    value: Any
    resume_token: str
    created_time: datetime
    source: str

    @classmethod
    def from_wire(cls, wire: StreamMessageWire, value: Any) -> StreamMessage:
        """Build from the wire message and its already decoded value."""
        created = _time(wire.created_time)
        assert created is not None
        return cls(
            value=value, resume_token=wire.resume_token, created_time=created, source=wire.source
        )


@dataclass(frozen=True, kw_only=True)
class StreamMessagesPage:
    """A newest-first page of ``list_stream_messages``; pass ``before_page_token`` for more."""

    messages: tuple[StreamMessage, ...]
    before_page_token: str | None = None


@dataclass(frozen=True, kw_only=True)
class FlowListPage:
    """A newest-first page of ``list_flows``; pass ``next_page_token`` for the next one."""

    flows: tuple[FlowInfo, ...]
    next_page_token: str | None = None
