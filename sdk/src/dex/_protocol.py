"""Wire types shared by the SDK and the server, so the two sides cannot drift.

Every value a user defines (Step input, Attribute values, Channel messages, RPC input and
output) travels as raw canonical JSON (``msgspec.Raw``): the server stores and forwards it
without decoding. Values larger than the blob threshold travel in tasks as blob references
(``Task.blob_refs``) that the Worker resolves through ``GET /v1/blobs/{hash}`` and its
blob cache.

Physical state names: an Attribute or Channel is named by its declared name; an
AttributeMap or ChannelMap instance by ``"<name>/<url-quoted key>"``.

Transport:

* Clients use HTTP/JSON under ``/v1`` (see ``ApiError`` for failures).
* Workers open one WebSocket at ``/v1/worker``; frames are JSON objects of the tagged
  unions ``WorkerFrame`` (Worker to server) and ``ServerFrame`` (server to Worker). One
  connection carries many tasks at once, keyed by ``task_id``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any, Literal

import msgspec
from msgspec import Raw, Struct

PROTOCOL_VERSION = 1

MAX_FLOW_ID_BYTES = 1024
"""Longest accepted Flow ID, in UTF-8 bytes. Fixed, so a client can refuse a longer one
before it sends anything; a server rejects it with ``LIMIT_EXCEEDED``."""

MAX_RESUME_TASK_IDS = 10_000
"""The most task IDs a ``Register`` frame may list in ``resume_task_ids``."""

# msgspec cannot decode ``Raw`` inside a union (``Raw | None`` rejects every non-null
# value). Optional raw fields are therefore declared as ``Raw`` for msgspec with a
# ``None`` default: an absent field decodes to None, a present one (even ``null``) to Raw.
# Type checkers see ``Raw | None``.
if TYPE_CHECKING:
    OptionalRaw = Raw | None
else:
    OptionalRaw = Raw

# --------------------------------------------------------------------------- definitions


class RetryPolicySpec(Struct, kw_only=True, omit_defaults=True):
    """Retry policy of one Step method; ``None`` fields take the server defaults."""

    initial_interval_s: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval_s: float = 100.0
    maximum_attempts: int | None = None  # None: unlimited (bounded by total_duration_s)
    total_duration_s: float | None = 4 * 3600.0


class LoadSpec(Struct, kw_only=True, omit_defaults=True):
    """State a method (or RPC) asks to receive beyond the always-loaded singletons."""

    attribute_maps: list[str] = []  # declared map names: every instance
    attribute_map_instances: list[str] = []  # physical names "<map>/<quoted key>"
    channels: list[str] = []  # Channel names: pending messages
    channel_maps: list[str] = []  # ChannelMap names: every instance's pending messages
    channel_map_instances: list[str] = []  # physical names


class StepOptionsSpec(Struct, kw_only=True, omit_defaults=True):
    """Resolved options of a Step type, or a per-movement override (replaces them whole)."""

    wait_for_timeout_s: float = 7200.0
    execute_timeout_s: float = 7200.0
    heartbeat_timeout_s: float | None = None  # None: no heartbeat timeout
    # longest wait of a ready attempt for a Worker; None: the server's default (forever)
    schedule_to_start_timeout_s: float | None = None
    wait_for_retry: RetryPolicySpec = msgspec.field(default_factory=RetryPolicySpec)
    execute_retry: RetryPolicySpec = msgspec.field(default_factory=RetryPolicySpec)
    wait_for_failure_proceed: bool = False  # PROCEED: run execute with wait_for_method_failed
    execute_failure_step: str | None = None  # recovery Step type
    execute_failure_options: StepOptionsSpec | None = None
    wait_for_durability: Literal["default", "sync", "async"] = "default"
    execute_durability: Literal["default", "sync", "async"] = "default"
    wait_for_locks: list[str] = []  # physical Attribute / map-instance names
    execute_locks: list[str] = []
    wait_for_loads: LoadSpec = msgspec.field(default_factory=LoadSpec)
    execute_loads: LoadSpec = msgspec.field(default_factory=LoadSpec)
    # wait_for builds its Wait from the input alone: a movement may carry it (Movement.wait)
    wait_for_inline: bool = False
    # execute may come with the result that satisfies the Wait (TaskResult.inline_execute)
    execute_inline: bool = False


class StepSpec(Struct, kw_only=True, omit_defaults=True):
    step_type: str
    has_wait_for: bool = False
    options: StepOptionsSpec = msgspec.field(default_factory=StepOptionsSpec)


class RpcSpec(Struct, kw_only=True, omit_defaults=True):
    name: str
    is_transactional: bool = False
    locks: list[str] = []
    loads: LoadSpec = msgspec.field(default_factory=LoadSpec)
    timeout_s: float = 60.0
    has_input: bool = False


class StateDecl(Struct, kw_only=True, omit_defaults=True):
    """One declared persistence name."""

    name: str
    kind: Literal["attribute", "attribute_map", "channel", "channel_map", "stream"]
    stream_capacity_bytes: int | None = None
    index_type: str | None = None
    """Search index type of an Attribute (``IndexType`` value), None when not indexed."""
    index_key: str = ""
    """The search field of an indexed Attribute (``""``: its name)."""


class FlowSpec(Struct, kw_only=True, omit_defaults=True):
    """What the server needs to run a Flow type without running user code itself."""

    flow_type: str
    start_step: str | None = None
    steps: list[StepSpec] = []
    rpcs: list[RpcSpec] = []
    state: list[StateDecl] = []
    # the Flow overrides ``handle_timeout`` (a DEFAULT timeout policy then runs it)
    has_timeout_handler: bool = False


# the Step type of a Flow's soft-timeout timer and of its handler's invocation
TIMEOUT_HANDLER_STEP = "sys:timeout_handler"


# --------------------------------------------------------------------------- waits, decisions


class SubFlowStartSpec(Struct, kw_only=True, omit_defaults=True):
    """How a SubFlow condition starts its child Flow (sent by the Worker, kept by nobody).

    The server starts (or reuses) the child in the commit that records the Wait, then keeps
    only the child's ``flow_id`` / ``run_id`` in the condition.
    """

    flow_type: str
    spec: FlowSpec
    input: OptionalRaw = None
    reuse_policy: Literal["attach", "restart_if_previous_exits_abnormally", "always_restart"] = (
        "restart_if_previous_exits_abnormally"
    )
    initial_attributes: list[InitialAttribute] = []
    start_delay_s: float | None = None
    # optional features the child's start depends on (as ``StartFlowRequest.requires``)
    requires: list[str] = []
    # the override merged into the parent's config, and the child's soft timeout
    config: FlowConfigWire | None = None
    timeout: FlowTimeoutSpec | None = None


class ConditionSpec(Struct, kw_only=True, omit_defaults=True):
    """One Wait condition. ``kind="timer"`` uses duration_s or fire_at (unix seconds).

    ``kind="subflow"``: the Worker sends ``subflow``; the server replaces it with the
    child's ``flow_id`` and ``run_id``.
    """

    kind: Literal["timer", "channel", "subflow"]
    condition_id: str | None = None
    duration_s: float | None = None
    fire_at: float | None = None
    channel: str | None = None  # physical Channel name
    min_count: int = 1
    max_count: int | None = 1  # None: unbounded (at_least)
    subflow: SubFlowStartSpec | None = None
    flow_id: str | None = None  # a SubFlow condition's child Flow ID (set by the server)
    run_id: str | None = None  # the child run the condition waits for (set by the server)


class WaitSpec(Struct, kw_only=True, omit_defaults=True):
    """A Wait; for ``any_combination``, ``groups`` lists its combinations.

    Each group (declaration order) holds indices into ``conditions``, which lists each
    distinct condition once, in order of first appearance.
    """

    mode: Literal["all", "any", "skip", "any_combination"] = "all"
    conditions: list[ConditionSpec] = []
    groups: list[list[int]] = []


class Movement(Struct, kw_only=True, omit_defaults=True):
    step_type: str
    input: OptionalRaw = None
    options: StepOptionsSpec | None = None
    # the target's wait_for result, run inline by the Worker (options.wait_for_inline)
    wait: WaitSpec | None = None


class DecisionSpec(Struct, kw_only=True, omit_defaults=True):
    """An execute decision.

    ``force_complete_if_channels_empty`` completes with ``output`` when ``empty_channels``
    (physical Channel names) and every instance of ``empty_channel_maps`` hold no message
    at commit, else goes to ``movements[0]``.
    """

    kind: Literal[
        "go_to",
        "graceful_complete",
        "force_complete",
        "force_fail",
        "dead_end",
        "force_complete_if_channels_empty",
    ]
    movements: list[Movement] = []
    empty_channels: list[str] = []
    empty_channel_maps: list[str] = []
    output: OptionalRaw = None
    reason: str | None = None
    cancel_steps: list[str] = []
    cancel_sibling_steps: list[str] = []


# --------------------------------------------------------------------------- tasks


class ChannelMessageWire(Struct, kw_only=True):
    message_id: str
    value: Raw


class ConditionResultsWire(Struct, kw_only=True, omit_defaults=True):
    """Outcome of a satisfied Wait, in the order the Wait declared its conditions."""

    timers_fired: list[bool] = []  # one per timer condition, declaration order
    channel_values: list[list[Raw]] = []  # one list per channel condition, declaration order
    channel_names: list[str] = []  # physical channel of each channel condition
    subflows: list[SubFlowResultWire] = []  # one per SubFlow condition, declaration order


class SubFlowResultWire(Struct, kw_only=True, omit_defaults=True):
    """A SubFlow condition's child as it was when its Wait was satisfied.

    Its status is ``running`` when another condition won an ``any`` Wait first.
    """

    flow_id: str
    run_id: str
    result: FlowResultWire


class RecoveryErrorWire(Struct, kw_only=True):
    detail: str
    error_type: str


class Task(Struct, kw_only=True, omit_defaults=True):
    """One handler invocation sent to a Worker."""

    task_id: str
    kind: Literal["wait_for", "execute", "rpc"]
    flow_type: str
    flow_id: str
    run_id: str
    step_type: str | None = None
    step_execution_id: str | None = None
    from_step_execution_id: str | None = None
    rpc_name: str | None = None
    attempt: int = 1
    first_attempt_at: float = 0.0
    deadline: float = 0.0  # unix seconds
    heartbeat_timeout_s: float | None = None
    input: OptionalRaw = None
    attributes: dict[str, Raw] = {}  # physical name -> value; absent means unset
    blob_refs: dict[str, str] = {}  # physical name -> blob hash, for offloaded values
    input_blob: str | None = None  # blob hash when the input itself was offloaded
    loaded_maps: list[str] = []  # maps loaded whole (key listing allowed)
    loaded_map_instances: list[str] = []  # physical names requested (absent = unset)
    channel_sizes: dict[str, int] = {}  # physical name -> pending count (non-empty only)
    pending_messages: dict[str, list[ChannelMessageWire]] = {}  # loaded channels only
    loaded_channels: list[str] = []  # physical names or map names whose messages are loaded
    condition_results: ConditionResultsWire | None = None
    recovery_error: RecoveryErrorWire | None = None
    wait_for_failed: bool = False
    locals: dict[str, Raw] = {}
    last_heartbeat_value: OptionalRaw = None


class ErrorInfo(Struct, kw_only=True, omit_defaults=True):
    error_type: str
    message: str
    stack: str | None = None
    retry_after_s: float | None = None
    non_retryable: bool = False


class ChannelDelete(Struct, kw_only=True):
    channel: str
    message_id: str


class Publish(Struct, kw_only=True):
    channel: str
    value: Raw


class CommittedStreamWrite(Struct, kw_only=True):
    """A Stream write the server appends only once the task's result has committed."""

    stream: str
    value: Raw


class RecordedEvent(Struct, kw_only=True):
    name: str
    value: OptionalRaw = None


class TaskResult(Struct, kw_only=True, omit_defaults=True):
    """The one final outcome of a task: an error, or effects plus a Wait/decision/output."""

    task_id: str
    error: ErrorInfo | None = None
    attribute_writes: dict[str, OptionalRaw] = {}  # None deletes
    publishes: list[Publish] = []
    channel_deletes: list[ChannelDelete] = []
    locals: dict[str, Raw] = {}
    events: list[RecordedEvent] = []
    wait: WaitSpec | None = None  # wait_for result
    decision: DecisionSpec | None = None  # execute result
    rpc_output: OptionalRaw = None
    rpc_movements: list[Movement] = []
    rpc_cancel_steps: list[str] = []
    stream_writes: list[CommittedStreamWrite] = []  # appended after the commit, in order
    # the execute of the Step whose Wait this result satisfies (options.execute_inline)
    inline_execute: InlineExecute | None = None

    def __post_init__(self) -> None:
        # A JSON null in attribute_writes decodes as Raw(b"null"); it means "delete".
        writes = self.attribute_writes
        for name, value in writes.items():
            if value is not None and bytes(value) == b"null":
                writes[name] = None


class InlineExecute(Struct, kw_only=True):
    """An ``execute`` the Worker ran on the snapshot it expects the server to build.

    The server takes ``result`` only when the task it builds for the execution, once the
    carrying result has committed, has this ``digest`` (:func:`task_digest`).
    """

    execution_id: str
    digest: str
    result: TaskResult


class _DigestFields(Struct, array_like=True):
    kind: str
    run_id: str
    step_type: str | None
    step_execution_id: str | None
    from_step_execution_id: str | None
    attempt: int
    input: OptionalRaw
    input_blob: str | None
    attributes: list[tuple[str, Raw]]
    blob_refs: list[tuple[str, str]]
    loaded_maps: list[str]
    loaded_map_instances: list[str]
    channel_sizes: list[tuple[str, int]]
    pending_messages: list[tuple[str, list[ChannelMessageWire]]]
    loaded_channels: list[str]
    condition_results: ConditionResultsWire | None
    recovery_error: RecoveryErrorWire | None
    wait_for_failed: bool
    locals: list[tuple[str, Raw]]
    last_heartbeat_value: OptionalRaw


def task_digest(task: Task) -> str:
    """A hash of everything a handler can see of ``task`` (not its ID, timing or deadline)."""
    fields = _DigestFields(
        kind=task.kind,
        run_id=task.run_id,
        step_type=task.step_type,
        step_execution_id=task.step_execution_id,
        from_step_execution_id=task.from_step_execution_id,
        attempt=task.attempt,
        input=task.input,
        input_blob=task.input_blob,
        attributes=sorted(task.attributes.items()),
        blob_refs=sorted(task.blob_refs.items()),
        loaded_maps=sorted(task.loaded_maps),
        loaded_map_instances=sorted(task.loaded_map_instances),
        channel_sizes=sorted(task.channel_sizes.items()),
        pending_messages=sorted(task.pending_messages.items()),
        loaded_channels=sorted(task.loaded_channels),
        condition_results=task.condition_results,
        recovery_error=task.recovery_error,
        wait_for_failed=task.wait_for_failed,
        locals=sorted(task.locals.items()),
        last_heartbeat_value=task.last_heartbeat_value,
    )
    return hashlib.sha256(msgspec.json.encode(fields)).hexdigest()


# --------------------------------------------------------------------------- worker stream


class Register(Struct, tag="register", kw_only=True):
    """The first frame of a Worker connection.

    ``worker_instance_id`` identifies the Worker process across its reconnects (random,
    made once per Worker; ``""``: the Worker cannot resume). ``resume_task_ids`` lists the
    tasks of an earlier connection of that instance the Worker still runs, or whose result
    it sent just before that connection closed; the server answers, in
    ``Registered.resumed_task_ids``, which of them it still holds for the Worker.
    """

    app_worker_id: str
    flows: list[FlowSpec]
    max_concurrent_tasks: int
    reserved_rpc_tasks: int
    sdk_version: str = ""
    protocol_version: int = PROTOCOL_VERSION
    worker_instance_id: str = ""
    resume_task_ids: list[str] = []
    accepts_batches: bool = False
    """The Worker reads ``ServerBatch`` frames (an older Worker gets single frames only)."""


class Heartbeat(Struct, tag="heartbeat", kw_only=True, omit_defaults=True):
    """Liveness of one task. ``durable=True`` asks the server to commit "started" and ack."""

    task_id: str
    value: OptionalRaw = None
    has_value: bool = False
    durable: bool = False
    seq: int = 0


class StreamWrite(Struct, tag="stream_write", kw_only=True):
    task_id: str
    stream: str
    value: Raw


class ResultFrame(Struct, tag="result", kw_only=True):
    result: TaskResult


class Reject(Struct, tag="reject", kw_only=True):
    task_id: str
    reason: Literal["no_capacity", "unknown_name", "stopping"]


class ReadState(Struct, tag="read_state", kw_only=True, omit_defaults=True):
    """On-demand read of committed AttributeMap instances by a running task.

    Either ``names`` (physical instance names, point reads) or the physical-name range
    ``[start, end)`` in byte order, at most ``limit`` instances (``None``: no limit).
    ``start`` / ``end`` default to the whole map. The server answers ``StateValues`` with
    the same ``request_id``.
    """

    task_id: str
    request_id: int
    map: str  # declared AttributeMap name
    names: list[str] | None = None
    start: str | None = None  # physical name, inclusive
    end: str | None = None  # physical name, exclusive
    limit: int | None = None


class WorkerBatch(Struct, tag="batch", kw_only=True):
    """Several frames of a registered Worker in one WebSocket message, handled in order.

    Sent only to a server whose ``Registered.accepts_batches`` is set, and never larger
    than its ``max_frame_bytes``. It saves a message (a write and a wake-up on each side)
    per frame when frames queue up faster than they leave.
    """

    frames: list[Heartbeat | StreamWrite | ResultFrame | Reject | ReadState]


WorkerFrame = Register | Heartbeat | StreamWrite | ResultFrame | Reject | ReadState | WorkerBatch


class Registered(Struct, tag="registered", kw_only=True):
    """The server accepted the Worker.

    ``max_frame_bytes`` is the largest frame the server accepts from this Worker (``0``: not
    announced). A Worker must not send a larger frame: the server would close the
    connection. The SDK turns a task result that would be larger into a
    ``LIMIT_EXCEEDED`` error result instead.

    ``resumed_task_ids``: the tasks of ``Register.resume_task_ids`` now on this connection;
    the Worker sends their frames and results here and stops every other task it still
    runs (the server no longer holds it for the Worker). ``reconnect_grace_s``: how long the
    server holds a Worker's tasks after its connection closes (``0``: no resuming).
    """

    server_version: str
    blob_threshold_bytes: int
    max_frame_bytes: int = 0
    resumed_task_ids: list[str] = []
    reconnect_grace_s: float = 0.0
    accepts_batches: bool = False
    """The server reads ``WorkerBatch`` frames (an older server gets single frames only)."""


class TaskFrame(Struct, tag="task", kw_only=True):
    task: Task


class HeartbeatAck(Struct, tag="heartbeat_ack", kw_only=True, omit_defaults=True):
    """Answer to a durable ``Heartbeat``: the start is committed, or ``error_code`` says why not.

    ``error_code`` is one of ``ErrorCode`` (``FLOW_NOT_ACTIVE``, ``UNAVAILABLE``,
    ``INTERNAL``); ``error`` explains it.
    """

    task_id: str
    seq: int
    error_code: str | None = None
    error: str | None = None


class CancelTask(Struct, tag="cancel_task", kw_only=True):
    task_id: str
    reason: str = ""


class RegisterRejected(Struct, tag="register_rejected", kw_only=True):
    code: str
    message: str


class StateValues(Struct, tag="state_values", kw_only=True, omit_defaults=True):
    """Answer to ``ReadState``: committed values at read time, in physical-name order.

    ``names`` lists every instance found (set), in order; each is in ``values`` (inline
    JSON) or ``blob_refs`` (offloaded, fetch ``GET /v1/blobs/{hash}``). On failure
    ``error_code`` / ``error`` say why and nothing else is set.
    """

    task_id: str
    request_id: int
    names: list[str] = []
    values: dict[str, Raw] = {}
    blob_refs: dict[str, str] = {}
    error_code: str | None = None
    error: str | None = None


class ServerBatch(Struct, tag="batch", kw_only=True):
    """Several frames for a Worker in one WebSocket message, handled in order.

    Sent only to a Worker whose ``Register.accepts_batches`` is set.
    """

    frames: list[TaskFrame | HeartbeatAck | CancelTask | StateValues]


ServerFrame = (
    Registered
    | TaskFrame
    | HeartbeatAck
    | CancelTask
    | RegisterRejected
    | StateValues
    | ServerBatch
)

BATCH_HEAD = b'{"type":"batch","frames":['
BATCH_TAIL = b"]}"


def encode_batch(frames: list[bytes]) -> bytes:
    """One batch frame (``WorkerBatch`` / ``ServerBatch``) of already encoded frames."""
    return BATCH_HEAD + b",".join(frames) + BATCH_TAIL


# --------------------------------------------------------------------------- client API


class InitialAttribute(Struct, kw_only=True):
    name: str  # physical name
    value: Raw


class WorkerTargetWire(Struct, kw_only=True, omit_defaults=True):
    address: str = ""
    headless: bool = False
    pull: bool = False


class FlowConfigWire(Struct, kw_only=True, omit_defaults=True):
    """A Flow's ``FlowConfig``; a field left None keeps the current (or default) value.

    ``attribute_store_names=[]`` is kept as given (it disables Attribute Stores).
    """

    active_step_search_mode: Literal["default", "all", "with_wait_for", "disabled"] | None = None
    continue_as_new_threshold: int | None = None
    continue_as_new_page_size_bytes: int | None = None
    step_durability: Literal["default", "sync", "async"] | None = None
    worker_target: WorkerTargetWire | None = None
    attribute_store_names: list[str] | None = None


class FlowTimeoutSpec(Struct, kw_only=True, omit_defaults=True):
    """A Flow's soft timeout: ``timeout_s`` after the start, what ``policy`` does then.

    ``handler`` holds the timeout handler's options (an Execute-like invocation of
    ``Flow.handle_timeout``, Step type ``sys:timeout_handler``): its ``execute_*`` fields
    and ``execute_failure_step`` apply.
    """

    timeout_s: float
    policy: Literal["default", "fail", "cancel", "handler"] = "default"
    handler: StepOptionsSpec | None = None


class StartFlowRequest(Struct, kw_only=True, omit_defaults=True):
    flow_type: str
    flow_id: str
    spec: FlowSpec
    input: OptionalRaw = None
    id_reuse_policy: Literal[
        "default",
        "allow_if_previous_failed",
        "allow_if_not_running",
        "disallow",
        "allow_terminate_if_running",
    ] = "default"
    request_id: str = ""
    ignore_already_started: bool = False
    initial_attributes: list[InitialAttribute] = []
    start_delay_s: float | None = None
    # optional features the start depends on (a Flow timeout, a retry policy, ...); a
    # server that does not run one refuses the start with FEATURE_NOT_AVAILABLE
    requires: list[str] = []
    config: FlowConfigWire | None = None
    timeout: FlowTimeoutSpec | None = None


class SkipTimerRequest(Struct, kw_only=True, omit_defaults=True):
    """Which timer of a waiting Step execution to fire now (exactly one selector)."""

    condition_id: str | None = None
    condition_index: int | None = None


class StartFlowResponse(Struct, kw_only=True):
    run_id: str


class InvokeRpcRequest(Struct, kw_only=True, omit_defaults=True):
    rpc_name: str
    input: OptionalRaw = None
    run_id: str = ""
    timeout_s: float | None = None
    extra_loads: LoadSpec | None = None
    extra_locks: list[str] = []
    # idempotency key: a second invocation with it returns the first one's output
    request_id: str = ""


class InvokeRpcResponse(Struct, kw_only=True, omit_defaults=True):
    output: OptionalRaw = None


class StopFlowRequest(Struct, kw_only=True, omit_defaults=True):
    type: Literal["cancel", "terminate", "fail"] = "cancel"
    reason: str | None = None


class FlowInfoWire(Struct, kw_only=True, omit_defaults=True):
    flow_id: str
    run_id: str
    flow_type: str
    status: Literal["running", "completed", "failed", "canceled", "terminated", "continued_as_new"]
    started_at: float
    closed_at: float | None = None
    config: FlowConfigWire | None = None
    # absolute soft-timeout deadline (unix seconds) of the run, if it has one
    timeout_at: float | None = None


class CompletionWire(Struct, kw_only=True, omit_defaults=True):
    step_type: str
    step_execution_id: str
    output: OptionalRaw = None


class FlowResultWire(Struct, kw_only=True, omit_defaults=True):
    status: Literal["running", "completed", "failed", "canceled", "terminated", "continued_as_new"]
    error_type: str | None = None
    error_message: str | None = None
    completions: list[CompletionWire] = []


class FlowListResponse(Struct, kw_only=True, omit_defaults=True):
    flows: list[FlowInfoWire]
    next_page_token: str | None = None


class SearchFlowWire(Struct, kw_only=True, omit_defaults=True):
    """One Flow run found by a search, with its indexed Attribute values by index key."""

    flow_id: str
    run_id: str
    flow_type: str
    status: str
    started_at: float
    closed_at: float | None = None
    indexed_attributes: dict[str, Any] = {}


class SearchFlowsResponse(Struct, kw_only=True, omit_defaults=True):
    """One page of ``GET /v1/flows?query=...``; ``next_page_token`` is None on the last."""

    flows: list[SearchFlowWire]
    next_page_token: str | None = None


class AttributeMatchResponse(Struct, kw_only=True, omit_defaults=True):
    """The committed value that satisfied ``GET /v1/flows/{id}/attributes/match``."""

    value: OptionalRaw = None


class HistoryEventWire(Struct, kw_only=True, omit_defaults=True):
    """One semantic history event; ``type`` is a name of spec section 7.1."""

    event_id: int
    event_time: float
    type: str
    payload: Raw


class HistoryPage(Struct, kw_only=True, omit_defaults=True):
    """One page of a run's history (``Client.get_history``), oldest event first.

    Pass ``next_page_token`` back for the next page; None means this is the last one.
    """

    flow_id: str
    run_id: str
    events: list[HistoryEventWire]
    next_page_token: str | None = None


class ActiveStepWire(Struct, kw_only=True, omit_defaults=True):
    step_execution_id: str
    step_type: str
    from_step_execution_id: str
    phase: str  # queued_wait_for, running_wait_for, waiting, queued_execute, running_execute
    attempt: int = 1
    last_failure: ErrorInfo | None = None


class FlowStateWire(Struct, kw_only=True, omit_defaults=True):
    """A snapshot of a Flow's latest run (``Client.get_flow_state``), for tools and tests.

    ``channel_sizes`` maps physical Channel names to pending counts; ``attribute_names``
    lists the Attributes (and map instances) that hold a value.
    """

    info: FlowInfoWire
    active_steps: list[ActiveStepWire] = []
    channel_sizes: dict[str, int] = {}
    attribute_names: list[str] = []


class AttributeRangeSpec(Struct, kw_only=True, omit_defaults=True):
    """Instances of one AttributeMap with ``start <= physical name < end``, in name order.

    ``start`` / ``end`` are physical names (``"<map>/<URL-quoted key>"``), ``None`` for an
    open bound; ``limit`` caps the instances (``None``: all, else at least 1).
    """

    map: str
    start: str | None = None
    end: str | None = None
    limit: int | None = None


class ReadAttributesRequest(Struct, kw_only=True, omit_defaults=True):
    """Which committed Attribute values of a Flow to read (``Client.read_attributes``).

    ``names``: Attributes and map instances by physical name; ``maps``: every instance of
    these AttributeMaps; ``ranges``: key ranges of AttributeMaps; ``run_id``: a run of the
    Flow ID (default: the latest).
    """

    names: list[str] = []
    maps: list[str] = []
    ranges: list[AttributeRangeSpec] = []
    run_id: str = ""


class AttributeValuesWire(Struct, kw_only=True, omit_defaults=True):
    """Committed values of one run, read in one store transaction, without a Worker.

    ``values`` maps physical names to their JSON (blob references resolved); names without
    a value are left out. ``channel_sizes`` counts every Channel's pending messages.
    """

    info: FlowInfoWire
    values: dict[str, Raw] = {}
    channel_sizes: dict[str, int] = {}


class StreamWriteRequest(Struct, kw_only=True):
    source: str
    value: Raw


class StreamMessageWire(Struct, kw_only=True):
    value: Raw
    resume_token: str
    created_time: float
    source: str


class StreamReadResponse(Struct, kw_only=True, omit_defaults=True):
    message: StreamMessageWire | None = None  # None: long poll timed out
    # with max_messages: the messages after the token, oldest first (message is the first)
    messages: list[StreamMessageWire] = []


class StreamListResponse(Struct, kw_only=True, omit_defaults=True):
    messages: list[StreamMessageWire]
    before_page_token: str | None = None


class HealthResponse(Struct, kw_only=True):
    """The server's answer to ``Client.health_check``: version, store kind and status.

    ``status`` is ``"ok"``, or ``"degraded"`` while the server cannot reach its store
    (``reason`` says why; ``ok`` is then false). A degraded server keeps running and
    resumes on its own once the store answers again.
    """

    ok: bool
    version: str
    store: str
    status: Literal["ok", "degraded"] = "ok"
    reason: str | None = None


class ApiError(Struct, kw_only=True, omit_defaults=True):
    """Body of every non-2xx response. ``code`` is one of ``ErrorCode``.

    ``worker_error_type`` / ``worker_error_detail`` name the exception an RPC handler
    raised (``WORKER_API_ERROR`` only); ``detail`` then holds its stack trace.
    """

    code: str
    message: str
    detail: str | None = None
    flow_id: str | None = None
    retryable: bool = False
    worker_error_type: str | None = None
    worker_error_detail: str | None = None


class ErrorCode:
    """Stable error codes shared by the HTTP API and the SDK exceptions."""

    BAD_REQUEST = "BAD_REQUEST"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    FLOW_ALREADY_STARTED = "FLOW_ALREADY_STARTED"
    FLOW_NOT_FOUND = "FLOW_NOT_FOUND"
    FLOW_NOT_ACTIVE = "FLOW_NOT_ACTIVE"
    FLOW_CLOSING = "FLOW_CLOSING"
    UNKNOWN_FLOW_TYPE = "UNKNOWN_FLOW_TYPE"
    UNKNOWN_RPC = "UNKNOWN_RPC"
    WORKER_API_ERROR = "WORKER_API_ERROR"
    NO_WORKER_AVAILABLE = "NO_WORKER_AVAILABLE"
    RPC_LOCK_CONFLICT = "RPC_LOCK_CONFLICT"
    LONG_POLL_TIMEOUT = "LONG_POLL_TIMEOUT"
    REQUEST_TIMEOUT = "REQUEST_TIMEOUT"
    CHANNEL_MESSAGE_NOT_FOUND = "CHANNEL_MESSAGE_NOT_FOUND"
    LIMIT_EXCEEDED = "LIMIT_EXCEEDED"
    NOT_FOUND = "NOT_FOUND"  # no such route or blob (an unknown Flow is FLOW_NOT_FOUND)
    METHOD_NOT_ALLOWED = "METHOD_NOT_ALLOWED"
    UNAVAILABLE = "UNAVAILABLE"
    FEATURE_NOT_AVAILABLE = "FEATURE_NOT_AVAILABLE"
    INTERNAL = "INTERNAL"
    STEP_EXECUTION_NOT_FOUND = "STEP_EXECUTION_NOT_FOUND"
    TIMER_NOT_FOUND = "TIMER_NOT_FOUND"
    TIMER_NOT_PENDING = "TIMER_NOT_PENDING"


HTTP_STATUS: dict[str, int] = {
    ErrorCode.BAD_REQUEST: 400,
    ErrorCode.UNAUTHENTICATED: 401,
    ErrorCode.FLOW_ALREADY_STARTED: 409,
    ErrorCode.FLOW_NOT_FOUND: 404,
    ErrorCode.FLOW_NOT_ACTIVE: 412,
    ErrorCode.FLOW_CLOSING: 412,
    ErrorCode.UNKNOWN_FLOW_TYPE: 400,
    ErrorCode.UNKNOWN_RPC: 400,
    ErrorCode.WORKER_API_ERROR: 422,
    ErrorCode.NO_WORKER_AVAILABLE: 503,
    ErrorCode.RPC_LOCK_CONFLICT: 409,
    ErrorCode.LONG_POLL_TIMEOUT: 408,
    ErrorCode.REQUEST_TIMEOUT: 504,
    ErrorCode.CHANNEL_MESSAGE_NOT_FOUND: 404,
    ErrorCode.LIMIT_EXCEEDED: 413,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.METHOD_NOT_ALLOWED: 405,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.FEATURE_NOT_AVAILABLE: 422,
    ErrorCode.INTERNAL: 500,
    ErrorCode.STEP_EXECUTION_NOT_FOUND: 404,
    ErrorCode.TIMER_NOT_FOUND: 404,
    ErrorCode.TIMER_NOT_PENDING: 412,
}

worker_frame_decoder: msgspec.json.Decoder[WorkerFrame] = msgspec.json.Decoder(WorkerFrame)
server_frame_decoder: msgspec.json.Decoder[ServerFrame] = msgspec.json.Decoder(ServerFrame)
encoder = msgspec.json.Encoder()


# --------------------------------------------------------------------------- time travel


class TimeTravelRequest(Struct, kw_only=True, omit_defaults=True):
    """Fork a Flow's latest run into a new run (``POST /v1/flows/{flow_id}/time-travel``)."""

    type: Literal["beginning", "history_event_time", "step_type", "step_execution_id"]
    history_event_time: float | None = None  # seconds since the epoch
    step_type: str | None = None
    step_execution_id: str | None = None
    step_method: Literal["wait_for", "execute"] | None = None
    reason: str | None = None
    skip_writes_reapply: bool = False
    rerun_single_attempt: bool = False


class TimeTravelResponse(Struct, kw_only=True):
    run_id: str
