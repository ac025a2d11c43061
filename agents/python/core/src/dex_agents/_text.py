"""Pure helpers: storage keys, IDs, model-visible texts and runner-output validation."""

from __future__ import annotations

from collections.abc import Iterable

from dex_agents._enums import MessageRole, ToolCallStatus
from dex_agents._records import AgentToolCall, AgentUsage, FrameworkMessage
from dex_agents._runner import (
    MAX_CONTINUE_REASON_LENGTH,
    ContinueTurn,
    ModelStepOutcome,
    ToolCallsRequested,
    TurnCompleted,
)

SEQUENCE_KEY_DIGITS = 12
FAILURE_NOTE_HEADER = "[Dex] The previous turn failed after these tool calls ran:"
STOPPED_NOTE_HEADER = "[Dex] The previous turn was {how} after these tool calls ran:"
EDITED_PREFIX = "[The approver changed the arguments; the call ran with {arguments}]"
NOTE_FOOTER = "Do not repeat these tool calls unless the user asks again."


class InvalidRunnerOutputError(ValueError):
    """A runner returned something the session cannot store; the turn fails."""


def message_sequence_key(sequence: int) -> str:
    """Return the ``AgentMessages`` key of a 1-based sequence: 12 digits, zero-padded.

    Raises:
        ValueError: if ``sequence`` is not in 1..999,999,999,999.

    """
    if sequence < 1 or sequence >= 10**SEQUENCE_KEY_DIGITS:
        raise ValueError(f"message sequence out of range: {sequence}")
    return f"{sequence:0{SEQUENCE_KEY_DIGITS}d}"


def turn_id_of(turn_number: int) -> str:
    """Return the ID of the n-th turn (``"turn-<n>"``)."""
    return f"turn-{turn_number}"


def idempotency_key_of(flow_id: str, turn_id: str, tool_call_id: str) -> str:
    """Return a tool call's idempotency key, ``"<flow_id>/<turn_id>/<tool_call_id>"``."""
    return f"{flow_id}/{turn_id}/{tool_call_id}"


def interrupt_id_of(turn_id: str, tool_call_id: str) -> str:
    """Return the interrupt ID of an approval: ``"<turn_id>:<tool_call_id>"``."""
    return f"{turn_id}:{tool_call_id}"


def describe_tool_call_outcome(record: AgentToolCall) -> str:
    """Render the model-visible result of a final tool call record.

    ``succeeded`` gives the output itself; the other statuses give one sentence the
    model can act on (``outcome_unknown`` warns that a write may have taken effect).
    Beyond the seeds: a call an approver edited starts with the arguments it ran with,
    and a reconciled call says how its unknown outcome was settled and on what evidence.

    Raises:
        ValueError: if the record is not final.

    """
    text = _describe_status(record)
    if record.arguments_edited and record.status.ran:
        return f"{EDITED_PREFIX.format(arguments=record.arguments)} {text}"
    return text


def _describe_status(record: AgentToolCall) -> str:
    status = record.status
    settled = record.reconciliation
    if settled is not None and status is settled.status:
        outcome = "took effect" if status is ToolCallStatus.SUCCEEDED else "did not take effect"
        return (
            f"The outcome of this tool call was unknown at first; it was then checked "
            f"({settled.reconciled_by}) and it {outcome}: {settled.evidence}"
        )
    if status is ToolCallStatus.SUCCEEDED:
        return record.output or ""
    if status is ToolCallStatus.FAILED:
        return f"The tool call failed: {record.error or 'no detail'}"
    if status is ToolCallStatus.REJECTED:
        reason = record.rejection_message or "no reason given"
        return f"The user rejected this tool call: {reason}"
    if status is ToolCallStatus.OUTCOME_UNKNOWN:
        detail = f" ({record.error})" if record.error else ""
        return (
            "The outcome of this tool call is unknown: it may or may not have taken "
            f"effect{detail}. Check before trying it again."
        )
    if status is ToolCallStatus.CANCELLED:
        return "The tool call was cancelled before it ran."
    raise ValueError(f"tool call {record.tool_call_id!r} is not final ({status})")


def _note_lines(records: Iterable[AgentToolCall]) -> list[str]:
    ordered = sorted(records, key=lambda record: record.deferral_order)
    return [
        f"- {r.tool_name} {r.arguments} -> {r.status}: {describe_tool_call_outcome(r)}"
        for r in ordered
    ]


def build_turn_failure_note(records: Iterable[AgentToolCall]) -> str:
    """Render the note a failed turn leaves when tool calls already have final records.

    One line per final record, in ``deferral_order``; records that are not final are
    skipped. Returns "" when no record is final (the session then stores no note).
    """
    lines = _note_lines(r for r in records if r.status.is_final)
    if not lines:
        return ""
    return "\n".join([FAILURE_NOTE_HEADER, *lines, NOTE_FOOTER])


def build_turn_stopped_note(records: Iterable[AgentToolCall], *, how: str) -> str:
    """Render the note a steered or cancelled turn leaves for the tool calls that ran.

    ``how`` completes "The previous turn was ... after these tool calls ran" (for example
    "steered" or "cancelled"). Only calls that may have run are listed. Returns "" when
    none ran.
    """
    lines = _note_lines(r for r in records if r.status.ran)
    if not lines:
        return ""
    return "\n".join([STOPPED_NOTE_HEADER.format(how=how), *lines, NOTE_FOOTER])


def validate_user_message(message: FrameworkMessage) -> FrameworkMessage:
    """Check ``build_user_message``'s result.

    Raises:
        InvalidRunnerOutputError: if it is not a ``FrameworkMessage`` with role ``USER``.

    """
    if not isinstance(message, FrameworkMessage) or message.role is not MessageRole.USER:
        raise InvalidRunnerOutputError(
            f"build_user_message must return a FrameworkMessage with role user, got {message!r}"
        )
    return message


def validate_outcome(outcome: ModelStepOutcome) -> ModelStepOutcome:
    """Check a ``run_model_step`` outcome before anything of it is stored.

    Raises:
        InvalidRunnerOutputError: for an unknown outcome type, a usage that is neither an
            ``AgentUsage`` nor None, an empty run state, no tool calls, a tool call ID
            that is empty, contains ``/`` or repeats in the turn, or a ``ContinueTurn``
            reason that is not a string of at most ``MAX_CONTINUE_REASON_LENGTH``
            characters.

    """
    usage = getattr(outcome, "usage", None)
    if usage is not None and not isinstance(usage, AgentUsage):
        raise InvalidRunnerOutputError(f"usage must be an AgentUsage or None, got {usage!r}")
    if isinstance(outcome, TurnCompleted):
        for message in outcome.new_messages:
            if not isinstance(message, FrameworkMessage):
                raise InvalidRunnerOutputError(f"not a FrameworkMessage: {message!r}")
        return outcome
    if isinstance(outcome, ContinueTurn):
        return _validate_continue(outcome)
    if not isinstance(outcome, ToolCallsRequested):
        raise InvalidRunnerOutputError(
            "run_model_step must return TurnCompleted, ToolCallsRequested or ContinueTurn, "
            f"got {outcome!r}"
        )
    if not outcome.framework_run_state:
        raise InvalidRunnerOutputError("ToolCallsRequested.framework_run_state is empty")
    if not outcome.tool_calls:
        raise InvalidRunnerOutputError("ToolCallsRequested has no tool calls")
    seen: set[str] = set()
    for call in outcome.tool_calls:
        call_id = call.tool_call_id
        if not call_id:
            raise InvalidRunnerOutputError(f"tool call for {call.tool_name!r} has an empty ID")
        if "/" in call_id:
            raise InvalidRunnerOutputError(f"tool call ID {call_id!r} contains '/'")
        if call_id in seen:
            raise InvalidRunnerOutputError(f"tool call ID {call_id!r} repeats in this turn")
        seen.add(call_id)
    return outcome


def _validate_continue(outcome: ContinueTurn) -> ContinueTurn:
    if not isinstance(outcome.framework_run_state, str) or not outcome.framework_run_state:
        raise InvalidRunnerOutputError("ContinueTurn.framework_run_state is empty")
    reason = outcome.reason
    if not isinstance(reason, str):
        raise InvalidRunnerOutputError(f"ContinueTurn.reason must be a str, got {reason!r}")
    if len(reason) > MAX_CONTINUE_REASON_LENGTH:
        raise InvalidRunnerOutputError(
            f"ContinueTurn.reason is {len(reason)} characters, above "
            f"MAX_CONTINUE_REASON_LENGTH ({MAX_CONTINUE_REASON_LENGTH})"
        )
    return outcome


def validate_tool_call_ids_unused(
    outcome: ToolCallsRequested, recorded: Iterable[str]
) -> ToolCallsRequested:
    """Check that no requested ID repeats an ID already recorded in this turn.

    Raises:
        InvalidRunnerOutputError: naming the repeated ID.

    """
    known = set(recorded)
    for call in outcome.tool_calls:
        if call.tool_call_id in known:
            raise InvalidRunnerOutputError(
                f"tool call ID {call.tool_call_id!r} repeats in this turn"
            )
    return outcome


def is_blank(text: str | None) -> bool:
    """Whether a user text is missing, empty or only whitespace."""
    return text is None or not text.strip()
