"""String enums of the agent layer. The wire carries their plain string values."""

from __future__ import annotations

from enum import StrEnum


class MessageRole(StrEnum):
    """Who produced a stored message.

    ``build_user_message`` must return ``USER``; the other roles describe items a turn
    produced (model output, tool requests and tool results).
    """

    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"
    SYSTEM = "system"


class ToolEffect(StrEnum):
    """What running a tool call again would do; picks its Step, retries and approval.

    ``READ`` and ``IDEMPOTENT_WRITE`` run in ``CallTool`` (up to 3 attempts, no approval by
    default). ``NON_IDEMPOTENT_WRITE`` and ``UNCLASSIFIED`` run in ``CallSingleAttemptTool``
    (one attempt, approval required by default).
    """

    READ = "read"
    IDEMPOTENT_WRITE = "idempotent_write"
    NON_IDEMPOTENT_WRITE = "non_idempotent_write"
    UNCLASSIFIED = "unclassified"

    @property
    def is_retryable(self) -> bool:
        """Whether a call with this effect may run more than once (``CallTool``)."""
        return self in (ToolEffect.READ, ToolEffect.IDEMPOTENT_WRITE)


class ToolCallStatus(StrEnum):
    """Status of one ``AgentToolCall`` record.

    ``PENDING``, ``AWAITING_APPROVAL``, ``APPROVED`` and ``AWAITING_RECONCILIATION`` are
    not final: the tool has not produced a result yet (``AWAITING_RECONCILIATION``,
    beyond the seeds: its outcome is unknown and a person must settle it with
    ``reconcile_tool_call`` before the model is called again). Every other status is
    final, and a record becomes final exactly once, when its one ``ToolCallResults``
    message is published.
    """

    PENDING = "pending"
    AWAITING_APPROVAL = "awaiting_approval"
    APPROVED = "approved"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    OUTCOME_UNKNOWN = "outcome_unknown"
    CANCELLED = "cancelled"
    AWAITING_RECONCILIATION = "awaiting_reconciliation"

    @property
    def is_final(self) -> bool:
        """Whether the record has its result (no Step will change it again)."""
        return self not in (
            ToolCallStatus.PENDING,
            ToolCallStatus.AWAITING_APPROVAL,
            ToolCallStatus.APPROVED,
            ToolCallStatus.AWAITING_RECONCILIATION,
        )

    @property
    def ran(self) -> bool:
        """Whether the tool may have run (succeeded, failed or outcome unknown)."""
        return self in (
            ToolCallStatus.SUCCEEDED,
            ToolCallStatus.FAILED,
            ToolCallStatus.OUTCOME_UNKNOWN,
        )


class AgentStatus(StrEnum):
    """What the session is doing (``AgentState.status``)."""

    WAITING_FOR_USER_MESSAGE = "waiting_for_user_message"
    RUNNING_MODEL = "running_model"
    RUNNING_TOOLS = "running_tools"


class AgentEventType(StrEnum):
    """Type of an ``AgentEvent`` on the ``AgentEvents`` Stream; ``data`` keys in brackets.

    The seeds' events: ``turn_started`` {sequence}, ``turn_completed`` {message_count},
    ``turn_failed`` {error}, ``text_delta`` / ``reasoning_delta`` {text},
    ``tool_call_started`` {tool_call_id, tool_name}, ``tool_call_finished`` {tool_call_id,
    tool_name, status}, ``tool_call_deferred`` {tool_call_id, tool_name, effect,
    requires_approval}, ``interrupt_raised`` {interrupt_id, tool_call_id, tool_name,
    deadline}, ``interrupt_resolved`` {interrupt_id, approved, rejection_message},
    ``usage_recorded`` {recorded, session} (only for a model call that reported usage).
    Beyond them: ``turn_steered`` {message_count}
    and ``turn_cancelled`` {message_count}, written when a steered or cancelled turn ends,
    ``custom`` for a runner's own ``write_event`` payloads {name, ...}, and
    ``tool_call_reconciled`` {tool_call_id, tool_name, status, reconciled_by, evidence}
    when an ``outcome_unknown`` call is settled, and ``turn_continued`` {reason,
    model_calls} when a model call returned ``ContinueTurn`` (``model_calls``: the turn's
    model calls so far). ``interrupt_resolved`` also carries
    {approvers, arguments_sha256, arguments_edited} beyond the seeds. The
    ``interrupt_raised`` of a tool's question (``ToolInputRequired``) also has {kind,
    message}.
    """

    TURN_STARTED = "turn_started"
    TURN_COMPLETED = "turn_completed"
    TURN_FAILED = "turn_failed"
    TURN_STEERED = "turn_steered"
    TURN_CANCELLED = "turn_cancelled"
    TEXT_DELTA = "text_delta"
    REASONING_DELTA = "reasoning_delta"
    TOOL_CALL_STARTED = "tool_call_started"
    TOOL_CALL_FINISHED = "tool_call_finished"
    TOOL_CALL_DEFERRED = "tool_call_deferred"
    INTERRUPT_RAISED = "interrupt_raised"
    INTERRUPT_RESOLVED = "interrupt_resolved"
    USAGE_RECORDED = "usage_recorded"
    CUSTOM = "custom"
    TOOL_CALL_RECONCILED = "tool_call_reconciled"
    TURN_CONTINUED = "turn_continued"


class TurnControlKind(StrEnum):
    """Kind of a request that ends the running turn (``steer_user_message`` / ``cancel_turn``)."""

    STEER = "steer"
    CANCEL = "cancel"
