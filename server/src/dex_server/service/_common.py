from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import msgspec
from dex._protocol import (
    MAX_FLOW_ID_BYTES,
    ErrorCode,
    FlowSpec,
    RpcSpec,
    StepOptionsSpec,
    StepSpec,
    Task,
)

from dex_server.store import ExecRecord, StoredValue, Tx

DEFAULT_STREAM_CAPACITY = 10 * 1024 * 1024


class ServiceError(Exception):
    """A request the server rejects with an ``ErrorCode`` (becomes an ``ApiError``)."""

    def __init__(
        self, code: str, message: str, *, detail: str | None = None, flow_id: str | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail
        self.flow_id = flow_id


class LimitError(ServiceError):
    def __init__(self, limit: str, size: int, maximum: int, what: str) -> None:
        super().__init__(
            ErrorCode.LIMIT_EXCEEDED,
            f"{what} is {size} bytes, over the limit {limit}={maximum}",
        )


@dataclass(frozen=True, kw_only=True)
class Limits:
    blob_threshold_bytes: int
    max_value_bytes: int
    max_flow_state_bytes: int
    max_request_bytes: int
    retention_s: float
    max_flow_id_bytes: int = MAX_FLOW_ID_BYTES

    def check_value(self, raw: bytes | None, what: str) -> None:
        if raw is not None and len(raw) > self.max_value_bytes:
            raise LimitError("max_value_bytes", len(raw), self.max_value_bytes, what)

    def check_flow_id(self, flow_id: str) -> None:
        """Refuse an empty Flow ID (``BAD_REQUEST``) or one over ``max_flow_id_bytes``."""
        if not flow_id:
            raise ServiceError(ErrorCode.BAD_REQUEST, "flow_id must not be empty")
        size = len(flow_id.encode())
        if size > self.max_flow_id_bytes:
            raise LimitError("max_flow_id_bytes", size, self.max_flow_id_bytes, "flow_id")


class SpecIndex:
    """Latest definition of a Flow type with lookup tables."""

    def __init__(self, spec: FlowSpec) -> None:
        self.spec = spec
        self.steps: dict[str, StepSpec] = {s.step_type: s for s in spec.steps}
        self.step_types = frozenset(self.steps)
        self.rpcs: dict[str, RpcSpec] = {r.name: r for r in spec.rpcs}
        self.streams: dict[str, int] = {
            d.name: d.stream_capacity_bytes or DEFAULT_STREAM_CAPACITY
            for d in spec.state
            if d.kind == "stream"
        }

    def options(self, step_type: str) -> StepOptionsSpec:
        s = self.steps.get(step_type)
        return s.options if s is not None else StepOptionsSpec()

    def has_wait_for(self, step_type: str) -> bool:
        s = self.steps.get(step_type)
        return bool(s and s.has_wait_for)


class Specs:
    """Latest spec per Flow type; written by writer jobs, read from the event loop."""

    def __init__(self) -> None:
        self._by_type: dict[str, SpecIndex] = {}

    def put(self, spec: FlowSpec) -> SpecIndex:
        idx = SpecIndex(spec)
        self._by_type[spec.flow_type] = idx
        return idx

    def get(self, flow_type: str) -> SpecIndex | None:
        return self._by_type.get(flow_type)

    def require(self, flow_type: str) -> SpecIndex:
        idx = self._by_type.get(flow_type)
        if idx is None:
            idx = self.put(FlowSpec(flow_type=flow_type))
        return idx


@dataclass(kw_only=True)
class ReadyTask:
    """A Step method ready to be dispatched."""

    run_id: str
    flow_id: str
    flow_type: str
    execution_id: str
    kind: Literal["wait_for", "execute"]
    attempt: int
    locks: list[str]
    timeout_s: float
    heartbeat_timeout_s: float | None
    schedule_to_start_s: float | None = None
    task: Task | None = None
    version: int = 0
    record: ExecRecord | None = field(default=None, repr=False)
    """The record as this job last wrote it (spares re-reading it to build the task)."""


@dataclass(kw_only=True)
class Effects:
    """What the event loop must do after a job committed."""

    ready: list[ReadyTask] = field(default_factory=list)
    cancelled: list[tuple[str, str]] = field(default_factory=list)
    closed: list[tuple[str, str]] = field(default_factory=list)  # (flow_id, run_id)
    timers: list[tuple[float, str, str]] = field(default_factory=list)
    versions: dict[str, int] = field(default_factory=dict)

    def merge(self, other: Effects) -> None:
        self.ready += other.ready
        self.cancelled += other.cancelled
        self.closed += other.closed
        self.timers += other.timers
        self.versions.update(other.versions)


def store_value(tx: Tx, limits: Limits, run_id: str, raw: bytes) -> StoredValue:
    """Keep ``raw`` inline, or as a blob (by sha256) when over the blob threshold."""
    if len(raw) > limits.blob_threshold_bytes:
        h = hashlib.sha256(raw).hexdigest()
        tx.blobs.put(h, raw)
        tx.blobs.reference(run_id, h)
        return StoredValue(blob=h, size=len(raw))
    return StoredValue(value=msgspec.Raw(raw), size=len(raw))


def history_value(v: StoredValue | None) -> msgspec.Raw | None:
    from dex_server.engine.history import blob_reference

    if v is None:
        return None
    if v.blob is not None:
        return blob_reference(v.blob)
    return v.value
