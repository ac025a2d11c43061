"""Durable records of the store (encoded as JSON; user values stay raw JSON)."""

from __future__ import annotations

from typing import Literal

import msgspec
from dex._protocol import (
    CompletionWire,
    ConditionResultsWire,
    ErrorInfo,
    FlowConfigWire,
    FlowTimeoutSpec,
    OptionalRaw,
    RecoveryErrorWire,
    StepOptionsSpec,
    WaitSpec,
)
from msgspec import Struct

FlowStatus = Literal["running", "completed", "failed", "canceled", "terminated", "continued_as_new"]
Phase = Literal["wait_for", "waiting", "execute"]


class FlowRecord(Struct, kw_only=True, omit_defaults=True):
    """One run of a Flow execution."""

    run_id: str
    flow_id: str
    flow_type: str
    status: FlowStatus = "running"
    started_at: float
    closed_at: float | None = None
    retain_until: float | None = None
    request_id: str = ""
    input: OptionalRaw = None
    counters: dict[str, int] = {}
    completions: list[CompletionWire] = []
    closing: bool = False
    error_type: str | None = None
    error_message: str | None = None
    next_event_id: int = 1
    state_bytes: int = 0
    version: int = 0
    wait_seq: int = 0
    # the transactional RPC (on any server) whose snapshot Step results must not overtake
    commit_hold: str | None = None
    # the version of the Flow type's spec the run started with ("" before versions existed)
    spec_version: str = ""
    # time travel: recorded single-attempt outcomes this run takes instead of a rerun, by
    # execution id (engine/forks.py); the preserved run this one was forked from
    fork_outcomes: dict[str, msgspec.Raw] = {}
    forked_from: str | None = None
    # continue-as-new: roll over once more events are recorded than the FlowConfig's
    # continue_as_new_threshold (unset or 0: never), or at the next quiescent commit once
    # requested; the run this one handed over to / came from
    continue_pending: bool = False
    continued_to: str | None = None
    continued_from: str | None = None
    config: FlowConfigWire | None = None
    # the soft timeout the run started with (``policy`` resolved) and its absolute deadline
    timeout: FlowTimeoutSpec | None = None
    timeout_at: float | None = None
    # SubFlows: the Flow ID of the parent run whose Step started this run (the system search
    # index DexParentFlowID), and the Step executions (run_id, execution_id) waiting for this
    # run to end (woken by a Timer row at its close)
    parent_flow_id: str | None = None
    subflow_waiters: list[tuple[str, str]] = []


class ExecRecord(Struct, kw_only=True, omit_defaults=True):
    """One live Step execution (queued, running or waiting); deleted when it ends."""

    run_id: str
    execution_id: str
    step_type: str
    from_execution_id: str
    phase: Phase
    options: StepOptionsSpec
    first_attempt_at: float
    input: OptionalRaw = None
    input_blob: str | None = None
    attempt: int = 1
    not_before: float = 0.0
    wait: WaitSpec | None = None
    wait_seq: int = 0
    locals: dict[str, msgspec.Raw] = {}
    last_heartbeat_value: OptionalRaw = None
    last_failure: ErrorInfo | None = None
    recovery_error: RecoveryErrorWire | None = None
    wait_for_failed: bool = False
    condition_results: ConditionResultsWire | None = None
    started_attempt: int = 0
    # the claim columns (the store reads them into these fields, ``put`` writes them back):
    # the server dispatching the execution and how many times the claim changed hands
    claimed_by: str | None = None
    claim_epoch: int = 0


class StoredValue(Struct, kw_only=True):
    """A stored value: inline JSON or a blob hash."""

    value: OptionalRaw = None
    blob: str | None = None
    size: int = 0


def map_of(name: str) -> str | None:
    """The AttributeMap or ChannelMap a ``"<map>/<key>"`` instance name belongs to."""
    head, sep, _ = name.partition("/")
    return head if sep else None


AttributeRow = tuple[str, str, str | None, bytes | None, str | None, int]


def attribute_row(run_id: str, name: str, value: StoredValue) -> AttributeRow:
    """The ``attributes`` columns (run_id, name, map_name, value, blob_hash, size) of a value."""
    data = bytes(value.value) if value.value is not None else None
    return (run_id, name, map_of(name), data, value.blob, value.size)


class PendingMessage(Struct, kw_only=True):
    seq: int
    channel: str
    message_id: str
    value: msgspec.Raw


def claim(e: ExecRecord, server_id: str) -> None:
    """Set the claim ``ExecutionsStore.put`` writes (the epoch counts changes of hands).

    The writing server's while ``e`` is dispatchable, nobody's while it waits.
    """
    claimant = server_id if e.phase != "waiting" else None
    if e.claimed_by != claimant:
        e.claimed_by = claimant
        e.claim_epoch += 1


def with_claim(e: ExecRecord, claimed_by: object, epoch: object) -> ExecRecord:
    """``e`` with the claim columns of its row (they, not the JSON copy, are the truth)."""
    e.claimed_by = claimed_by if isinstance(claimed_by, str) else None
    e.claim_epoch = int(epoch)  # type: ignore[call-overload]
    return e


record_encoder = msgspec.json.Encoder()
flow_decoder = msgspec.json.Decoder(FlowRecord)
exec_decoder = msgspec.json.Decoder(ExecRecord)
