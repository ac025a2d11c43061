"""Value types the session stores, publishes, streams and returns from its RPCs.

All are frozen msgspec Structs, so they encode to canonical JSON with the plain string
values of their enums. The ones an application or a runner builds (``FrameworkMessage``,
``AgentUserMessage``, ``AgentSessionStartInput``, the interrupt answer and the message
listing request) take their fields positionally in the order listed, or by keyword; the
records the session builds itself are keyword-only.
"""

from __future__ import annotations

from typing import Any

import msgspec

from dex_agents._enums import (
    AgentEventType,
    AgentStatus,
    MessageRole,
    ToolCallStatus,
    ToolEffect,
    TurnControlKind,
)
from dex_agents._tool_input import InterruptKind, ToolInputAnswer, ToolQuestion


class AgentUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Token usage of one model call, or the session total (``AgentUsage`` Attribute).

    Attributes:
        requests: model requests made (a runner reports 1 per model call).
        input_tokens: prompt tokens.
        output_tokens: completion tokens.
        total_tokens: total tokens as the provider counts them (0 when unknown).

    """

    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def plus(self, other: AgentUsage) -> AgentUsage:
        """Return the field-wise sum of two usages."""
        return AgentUsage(
            requests=self.requests + other.requests,
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class FrameworkMessage(msgspec.Struct, frozen=True):
    """One item a framework produced or consumes, as the runner hands it to the session.

    Attributes:
        role: who produced it.
        framework_item: the framework's own JSON-compatible representation; a runner
            rebuilds its input from these.
        text: human-readable text for snapshots and UIs ("" when the item has none).

    """

    role: MessageRole
    framework_item: Any = None
    text: str = ""


class AgentMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One stored message of the session (``AgentMessages`` map, key ``sequence``).

    Attributes:
        sequence: 1-based position in the session; the map key is
            ``message_sequence_key(sequence)``.
        turn_id: the turn that stored it (``"turn-<n>"``).
        role: who produced it.
        framework_item: the framework's item, as the runner returned it.
        text: human-readable text.
        created_at: Unix seconds on the Worker that stored it.

    """

    sequence: int
    turn_id: str
    role: MessageRole
    framework_item: Any = None
    text: str = ""
    created_at: float = 0.0


class ApprovalReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """One person's approval of a tool call, kept on its interrupt and then on its record.

    Attributes:
        approver: who approved, as the application passed it ("" when it passed none).
            The server's tokens carry no subject, so the session records the string as
            given; the application is responsible for passing an authenticated identity.
        approved_at: Unix seconds on the server's clock when the approval arrived.
        arguments_sha256: sha256 (hex) of the canonical JSON of the exact arguments
            approved (``canonical_arguments_sha256``); the call runs with those.
        edited: whether this approver changed the arguments.

    """

    approver: str
    approved_at: float
    arguments_sha256: str
    edited: bool = False


class ToolCallReconciliation(msgspec.Struct, frozen=True, kw_only=True):
    """How an ``outcome_unknown`` call was settled (beyond the seeds).

    Attributes:
        status: ``succeeded`` (the write took effect) or ``failed`` (it did not).
        evidence: what the read-back found, or the note of the person who settled it.
        reconciled_by: ``"reconcile"`` for the policy's read-back function, else the
            person or system that called ``reconcile_tool_call``.
        reconciled_at: Unix seconds on the server's clock.
        unknown_detail: why the outcome was unknown (the failed Step's recovery detail).

    """

    status: ToolCallStatus
    evidence: str
    reconciled_by: str
    reconciled_at: float
    unknown_detail: str | None = None


class AgentToolCall(msgspec.Struct, frozen=True, kw_only=True):
    """Record of one tool call of the active turn (``AgentToolCalls`` map, key tool_call_id).

    Records are deleted when the turn ends; ``deferral_order`` keeps the model's order.

    Attributes:
        tool_call_id: the framework's ID, unique within the turn.
        turn_id: the turn that requested it.
        tool_name: the tool's name.
        arguments: the arguments the tool runs with: the model's, or the approved ones
            when an approver edited them (usually JSON text).
        effect: the resolved effect class.
        requires_approval: whether it waits in ``AwaitToolApproval`` before running.
        deferral_order: 0-based position among all calls the turn deferred.
        status: see ``ToolCallStatus``.
        idempotency_key: ``"<flow_id>/<turn_id>/<tool_call_id>"``.
        interrupt_id: the approval interrupt, when one was raised.
        output: the tool's output when ``SUCCEEDED``.
        error: the failure message (``FAILED``) or recovery detail (``OUTCOME_UNKNOWN``).
        rejection_message: why the call was rejected (``REJECTED``), if a reason was given.
        question: the question the call waits on (a ``question`` interrupt), if any.
        answers: answers to the call's questions so far, in order; replayed on each run.
        proposed_arguments: the arguments as the model produced them (beyond the seeds;
            None on records written before this field existed).
        approved_arguments: the exact arguments the approvals cover, once approved.
        approvals: the approval receipts (who, when, which arguments), oldest first.
        reconciliation: how an unknown outcome was settled, if it was.

    """

    tool_call_id: str
    turn_id: str
    tool_name: str
    arguments: str
    effect: ToolEffect
    requires_approval: bool
    deferral_order: int
    status: ToolCallStatus
    idempotency_key: str
    interrupt_id: str | None = None
    output: str | None = None
    error: str | None = None
    rejection_message: str | None = None
    question: ToolQuestion | None = None
    answers: list[ToolInputAnswer] = []
    proposed_arguments: str | None = None
    approved_arguments: str | None = None
    approvals: list[ApprovalReceipt] = []
    reconciliation: ToolCallReconciliation | None = None

    @property
    def arguments_edited(self) -> bool:
        """Whether an approver changed the model's arguments before the call ran."""
        return self.proposed_arguments is not None and self.arguments != self.proposed_arguments


class AgentInterrupt(msgspec.Struct, frozen=True, kw_only=True):
    """A tool call waiting for a person's approval (``PendingInterrupts`` list).

    Attributes:
        interrupt_id: ``"<turn_id>:<tool_call_id>"``; pass it to ``resolve_interrupt``.
        tool_call_id: the call it guards.
        turn_id: the turn that raised it.
        tool_name: the tool's name.
        arguments: the arguments awaiting approval (an approver's edit replaces the
            model's until the call runs).
        created_at: Unix seconds when it was raised (server clock: when the server
            dispatched the model call that raised it).
        deadline: Unix seconds (server clock) after which it expires as rejected, or None.
        arguments_sha256: sha256 of the canonical JSON of ``arguments``; pass it back to
            ``resolve_interrupt`` to approve exactly what you saw.
        min_approvals: distinct approvals needed before the call runs (default 1).
        approvals: the approvals collected so far for the current ``arguments``.
        proposed_arguments: the model's arguments, once an approver edited them.
        kind: ``approval`` (approve or reject the call) or ``question`` (the running tool
            asks for input: answer with ``approved=True`` and ``answer``, or decline).
        question: the tool's question, for a ``question`` interrupt.

    """

    interrupt_id: str
    tool_call_id: str
    turn_id: str
    tool_name: str
    arguments: str
    created_at: float
    deadline: float | None = None
    kind: InterruptKind = InterruptKind.APPROVAL
    question: ToolQuestion | None = None
    arguments_sha256: str = ""
    min_approvals: int = 1
    approvals: list[ApprovalReceipt] = []
    proposed_arguments: str | None = None


class AgentInterruptResolution(msgspec.Struct, frozen=True):
    """A person's answer, published to ``InterruptResolutions`` keyed by interrupt ID.

    ``arguments`` (the approved arguments) and ``approvals`` (the receipts) are beyond
    the seeds; ``rejected_by`` names who rejected.
    """

    interrupt_id: str
    approved: bool
    rejection_message: str | None = None
    answer: dict[str, Any] | None = None
    arguments: str | None = None
    approvals: list[ApprovalReceipt] = []
    rejected_by: str | None = None


class ResolveInterruptRequest(msgspec.Struct, frozen=True):
    """Input of the ``resolve_interrupt`` RPC. ``rejection_message`` is dropped on approval.

    The seeds' shape is ``ResolveInterruptRequest(interrupt_id, approved,
    rejection_message)``; the fields after it are optional and beyond the seeds.

    Attributes:
        interrupt_id: the pending interrupt.
        approved: approve (True) or reject (False).
        rejection_message: why it was rejected (shown to the model).
        arguments: edited arguments (a JSON object as text) the tool must run with
            instead of the model's; None keeps the arguments as they are.
        approver: who answers (recorded in the receipt; required when the tool's policy
            needs more than one approval).
        arguments_sha256: the ``AgentInterrupt.arguments_sha256`` the approver saw; the
            approval does not apply (False) when the arguments changed since.
        answer: the answer to a ``question`` interrupt (the fields its schema asks for).

    """

    interrupt_id: str
    approved: bool
    rejection_message: str | None = None
    answer: dict[str, Any] | None = None
    arguments: str | None = None
    approver: str | None = None
    arguments_sha256: str | None = None


class ReconcileToolCallRequest(msgspec.Struct, frozen=True):
    """Input of the ``reconcile_tool_call`` RPC (beyond the seeds).

    Attributes:
        tool_call_id: a call of the active turn waiting for reconciliation.
        succeeded: True when the write took effect, False when it did not.
        note: the evidence (required, at most 4,000 characters); the model sees it.
        reconciled_by: the person or system settling it (recorded as given).

    """

    tool_call_id: str
    succeeded: bool
    note: str
    reconciled_by: str = ""


class AgentUserMessage(msgspec.Struct, frozen=True):
    """A user message: input of ``send_user_message`` / ``steer_user_message``."""

    text: str


class ToolCallCompleted(msgspec.Struct, frozen=True, kw_only=True):
    """Internal ``ToolCallResults`` message: one per tool call, when its record is final.

    ``announced`` is False when an RPC finished the call (RPCs cannot write Streams), so
    ``ResumeTurn`` writes its ``tool_call_finished`` event.
    """

    tool_call_id: str
    status: ToolCallStatus
    announced: bool = True


class TurnControl(msgspec.Struct, frozen=True, kw_only=True):
    """Internal ``TurnControl`` message: a steer (with its text) or a cancel request."""

    kind: TurnControlKind
    text: str = ""


class UserInputCounts(msgspec.Struct, frozen=True, kw_only=True):
    """What RPCs handed to the session's waiting Steps so far (``UserInputCounts`` Attribute).

    Written by RPCs only (they commit one at a time), so no Step's write can overwrite a
    count. Compared with ``AgentState.taken_messages`` / ``taken_controls``: while they
    differ, a waiting Step holds or will take something, and the session is not idle even
    when both Channels read empty. Beyond the seeds.

    Attributes:
        queued_messages: user messages queued in ``QueuedUserMessages``.
        published_controls: steer and cancel requests published to ``TurnControl``.

    """

    queued_messages: int = 0
    published_controls: int = 0


class AgentState(msgspec.Struct, frozen=True, kw_only=True):
    """The session's state (``AgentState`` Attribute).

    Attributes:
        status: what the session does now.
        turn_count: turns started so far; the active turn is ``"turn-<turn_count>"``.
        active_turn_id: the running turn, or None while waiting for a user message.
        message_count: messages stored; the next one gets sequence ``message_count + 1``.
        last_turn_error: why the last failed turn failed; cleared when a turn completes.
        turn_model_calls: model calls the active turn committed so far (0 between turns);
            checked against ``AgentSessionOptions.max_model_calls_per_turn``. Beyond the
            seeds.
        turn_start_unannounced: True while a turn that ``send_user_message`` opened in
            its own commit waits for its first ``RunModel`` to write ``turn_started`` (RPCs
            cannot write Streams). Beyond the seeds.
        model_message_count: ``message_count`` when the last model call read the
            messages; the turn's first ``RunModel`` is scheduled with the messages stored
            since then loaded, so it need not ask the server for them. Beyond the seeds.
        taken_messages / taken_controls: queued user messages and turn controls that
            ``AwaitUserMessage`` and ``StopTurn`` took so far (see ``UserInputCounts``).
            Beyond the seeds.

    """

    status: AgentStatus = AgentStatus.WAITING_FOR_USER_MESSAGE
    turn_count: int = 0
    active_turn_id: str | None = None
    message_count: int = 0
    last_turn_error: str | None = None
    turn_model_calls: int = 0
    turn_start_unannounced: bool = False
    model_message_count: int = 0
    taken_messages: int = 0
    taken_controls: int = 0


class AgentSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """What ``get_agent_snapshot`` returns: enough to rebuild a UI.

    Attributes:
        session_id: the Flow ID.
        state: None until ``StartAgentSession`` commits.
        messages: the last 200 stored messages, oldest first.
        pending_interrupts: approvals waiting for an answer.
        tool_calls: the active turn's tool call records in ``deferral_order``.
        usage: the session's total usage.
        queued_message_count: user messages waiting for a turn.

    """

    session_id: str
    state: AgentState | None
    messages: list[AgentMessage] = []
    pending_interrupts: list[AgentInterrupt] = []
    tool_calls: list[AgentToolCall] = []
    usage: AgentUsage = AgentUsage()
    queued_message_count: int = 0


class ListAgentMessagesRequest(msgspec.Struct, frozen=True):
    """Input of ``list_agent_messages``: messages after ``after_sequence``, oldest first.

    ``limit`` is clamped to 1..200.
    """

    after_sequence: int = 0
    limit: int = 100


class AgentMessagesPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page of messages. ``next_after_sequence`` is None on the last page."""

    messages: list[AgentMessage] = []
    next_after_sequence: int | None = None


class AgentEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One message on the ``AgentEvents`` Stream.

    Attributes:
        type: see ``AgentEventType`` for each type's ``data`` keys.
        turn_id: the turn it belongs to.
        step_execution_id: the Step execution that wrote it (shared by its attempts).
        attempt: the Step attempt (1-based). A UI keeps, per ``step_execution_id``, only
            the text of the highest attempt it saw.
        data: the type's payload.
        created_at: Unix seconds on the Worker.

    """

    type: AgentEventType
    turn_id: str
    step_execution_id: str
    attempt: int
    data: dict[str, Any] = {}
    created_at: float = 0.0


class AgentSessionStartInput(msgspec.Struct, frozen=True):
    """Input of ``StartAgentSession``. A blank ``initial_message`` starts no turn."""

    initial_message: str | None = None
