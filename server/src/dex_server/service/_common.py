from __future__ import annotations

import hashlib
from dataclasses import dataclass
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

from dex_server.engine.history import blob_reference
from dex_server.engine.schema import StateNames, index_fields
from dex_server.store import ExecRecord, FlowRecord, StoredValue, Tx

DEFAULT_STREAM_CAPACITY = 10 * 1024 * 1024


class ServiceError(Exception):
    """A request the server rejects with an ``ErrorCode`` (becomes an ``ApiError``)."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        detail: str | None = None,
        flow_id: str | None = None,
        worker_error_type: str | None = None,
        worker_error_detail: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.detail = detail
        self.flow_id = flow_id
        # the exception an RPC handler raised (WORKER_API_ERROR)
        self.worker_error_type = worker_error_type
        self.worker_error_detail = worker_error_detail


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


_spec_encoder = msgspec.json.Encoder()


def spec_version(spec: FlowSpec) -> str:
    """The version of a Flow type's spec: a hash of its content (same code, same version)."""
    return hashlib.sha256(_spec_encoder.encode(spec)).hexdigest()[:32]


class SpecIndex:
    """One version of a Flow type's definition, with lookup tables."""

    def __init__(self, spec: FlowSpec, version: str | None = None) -> None:
        self.spec = spec
        self.version = spec_version(spec) if version is None else version
        self.steps: dict[str, StepSpec] = {s.step_type: s for s in spec.steps}
        self.step_types = frozenset(self.steps)
        self.rpcs: dict[str, RpcSpec] = {r.name: r for r in spec.rpcs}
        self.state_names = StateNames.of(spec)
        # declared Attribute (or map) name -> (index key, index type)
        self.indexes = index_fields(spec)
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
    """The spec versions this server knows, per Flow type, and each type's current one.

    A run is validated against the version it started with (``FlowRecord.spec_version``),
    so Workers and clients of several code versions can share a Flow type. The current
    version (the one last registered or started with) serves starts that carry no spec.
    This is a cache of the store's ``flow_specs``: only committed specs enter it (a job
    computes a new version's index, the event loop installs it after the commit), and a
    version it lacks is read from the store. Written by writer jobs and the event loop.
    """

    def __init__(self) -> None:
        self._by_type: dict[str, dict[str, SpecIndex]] = {}
        self._current: dict[str, SpecIndex] = {}

    def index(self, spec: FlowSpec) -> SpecIndex:
        """The index of ``spec`` (the cached one if known); installs nothing."""
        version = spec_version(spec)
        return self.known(spec.flow_type, version) or SpecIndex(spec, version)

    def install(self, idx: SpecIndex, *, current: bool = True) -> None:
        """Remember a committed version (and make it its type's current one)."""
        self._by_type.setdefault(idx.spec.flow_type, {}).setdefault(idx.version, idx)
        if current:
            self._current[idx.spec.flow_type] = idx

    def known(self, flow_type: str, version: str) -> SpecIndex | None:
        """The cached index of one version, if any."""
        return self._by_type.get(flow_type, {}).get(version)

    def get(self, flow_type: str) -> SpecIndex | None:
        """The current version of ``flow_type``, if this server knows one."""
        return self._current.get(flow_type)

    def current(self, tx: Tx, flow_type: str) -> SpecIndex | None:
        """The current version of ``flow_type``, from the store if another server knows it."""
        idx = self._current.get(flow_type)
        if idx is not None:
            return idx
        found = tx.specs.latest(flow_type)
        if found is None:
            return None
        idx = SpecIndex(found[1], found[0])
        self.install(idx)
        return idx

    def of_run(self, tx: Tx, flow: FlowRecord) -> SpecIndex:
        """The version ``flow`` started with (from the store when not cached yet)."""
        idx = self.known(flow.flow_type, flow.spec_version)
        if idx is not None:
            return idx
        spec = tx.specs.get(flow.flow_type, flow.spec_version)
        if spec is not None:
            idx = SpecIndex(spec, flow.spec_version)
            self.install(idx, current=False)
            return idx
        # a run older than spec versions, whose spec is gone: the type's current one
        return self.current(tx, flow.flow_type) or SpecIndex(FlowSpec(flow_type=flow.flow_type))

    def stream_capacity(self, flow_type: str, stream: str) -> int | None:
        """Capacity of ``stream`` in the current version, else in any version declaring it."""
        cur = self._current.get(flow_type)
        if cur is not None and stream in cur.streams:  # every Step's Stream write asks
            return cur.streams[stream]
        for idx in self._of_type(flow_type):
            if stream in idx.streams:
                return idx.streams[stream]
        return None

    def declares(self, flow_type: str, name: str, kind: str) -> bool:
        """Whether some version of ``flow_type`` declares state ``name`` of ``kind``."""
        return any(
            d.name == name and d.kind == kind
            for idx in self._of_type(flow_type)
            for d in idx.spec.state
        )

    def _of_type(self, flow_type: str) -> list[SpecIndex]:
        cur = self._current.get(flow_type)
        rest = [i for i in list(self._by_type.get(flow_type, {}).values()) if i is not cur]
        return [cur, *rest] if cur is not None else rest


class ReadyTask(msgspec.Struct, kw_only=True):
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
    record: ExecRecord | None = None
    """The record as this job last wrote it (spares re-reading it to build the task)."""


class Effects(msgspec.Struct, kw_only=True):
    """What the event loop must do after a job committed."""

    ready: list[ReadyTask] = []
    cancelled: list[tuple[str, str]] = []
    closed: list[tuple[str, str]] = []  # (flow_id, run_id)
    timers: list[tuple[float, str, str]] = []
    versions: dict[str, int] = {}
    specs: list[SpecIndex] = []
    """Spec versions the job stored, to install once it committed (never before)."""
    recorded: list[tuple[str, str]] = []
    """Executions that take a recorded outcome of a preserved run (time travel)."""
    continue_as_new: list[str] = []
    """Runs that may continue as new now (each checked again in its own job)."""
    streams: list[tuple[str, str, str, bytes, str]] = []
    """Stream writes a committed result carried: (flow type, Stream, Flow ID, value, source)."""

    def merge(self, other: Effects) -> None:
        self.ready += other.ready
        self.cancelled += other.cancelled
        self.closed += other.closed
        self.timers += other.timers
        self.versions.update(other.versions)
        self.specs += other.specs
        self.recorded += other.recorded
        self.continue_as_new += other.continue_as_new
        self.streams += other.streams


def store_value(tx: Tx, limits: Limits, run_id: str, raw: bytes) -> StoredValue:
    """Keep ``raw`` inline, or as a blob (by sha256) when over the blob threshold."""
    if len(raw) > limits.blob_threshold_bytes:
        h = hashlib.sha256(raw).hexdigest()
        tx.blobs.put(h, raw)
        tx.blobs.reference(run_id, h)
        return StoredValue(blob=h, size=len(raw))
    return StoredValue(value=msgspec.Raw(raw), size=len(raw))


def history_value(v: StoredValue | None) -> msgspec.Raw | None:
    if v is None:
        return None
    if v.blob is not None:
        return blob_reference(v.blob)
    return v.value
