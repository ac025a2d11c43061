from __future__ import annotations

import pytest
from dex_agents import (
    AgentToolCall,
    AgentUsage,
    DeferredToolCall,
    FrameworkMessage,
    InvalidRunnerOutputError,
    MessageRole,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolPolicy,
    TurnCompleted,
    build_turn_failure_note,
    build_turn_stopped_note,
    describe_tool_call_outcome,
    message_sequence_key,
)
from dex_agents._text import (
    idempotency_key_of,
    interrupt_id_of,
    is_blank,
    validate_outcome,
    validate_tool_call_ids_unused,
    validate_user_message,
)


def record(
    call_id: str,
    status: ToolCallStatus,
    *,
    order: int = 0,
    name: str = "lookup",
    output: str | None = None,
    error: str | None = None,
    rejection: str | None = None,
) -> AgentToolCall:
    return AgentToolCall(
        tool_call_id=call_id,
        turn_id="turn-1",
        tool_name=name,
        arguments='{"id":7}',
        effect=ToolEffect.READ,
        requires_approval=False,
        deferral_order=order,
        status=status,
        idempotency_key=f"s/turn-1/{call_id}",
        output=output,
        error=error,
        rejection_message=rejection,
    )


def test_message_sequence_key_is_twelve_zero_padded_digits() -> None:
    assert message_sequence_key(1) == "000000000001"
    assert message_sequence_key(123456789012) == "123456789012"
    keys = [message_sequence_key(n) for n in (1, 2, 10, 100, 9)]
    assert sorted(keys) == [message_sequence_key(n) for n in (1, 2, 9, 10, 100)]
    for bad in (0, -1, 10**12):
        with pytest.raises(ValueError):
            message_sequence_key(bad)


def test_ids_and_keys() -> None:
    assert idempotency_key_of("s-1", "turn-2", "call_a") == "s-1/turn-2/call_a"
    assert interrupt_id_of("turn-2", "call_a") == "turn-2:call_a"
    assert is_blank(None) and is_blank("") and is_blank(" \n\t")
    assert not is_blank(" x ")


def test_describe_each_final_status() -> None:
    assert describe_tool_call_outcome(record("a", ToolCallStatus.SUCCEEDED, output="42")) == "42"
    failed = describe_tool_call_outcome(record("a", ToolCallStatus.FAILED, error="no such order"))
    assert failed == "The tool call failed: no such order"
    rejected = describe_tool_call_outcome(
        record("a", ToolCallStatus.REJECTED, rejection="too expensive")
    )
    assert rejected == "The user rejected this tool call: too expensive"
    assert "no reason given" in describe_tool_call_outcome(record("a", ToolCallStatus.REJECTED))
    unknown = describe_tool_call_outcome(
        record("a", ToolCallStatus.OUTCOME_UNKNOWN, error="worker connection lost")
    )
    assert "unknown" in unknown and "worker connection lost" in unknown
    assert "cancelled" in describe_tool_call_outcome(record("a", ToolCallStatus.CANCELLED))


@pytest.mark.parametrize(
    "status", [ToolCallStatus.PENDING, ToolCallStatus.AWAITING_APPROVAL, ToolCallStatus.APPROVED]
)
def test_describe_rejects_records_that_are_not_final(status: ToolCallStatus) -> None:
    with pytest.raises(ValueError, match="not final"):
        describe_tool_call_outcome(record("a", status))


def test_failure_note_lists_final_records_in_deferral_order() -> None:
    records = [
        record("b", ToolCallStatus.FAILED, order=1, name="refund", error="boom"),
        record("c", ToolCallStatus.PENDING, order=2, name="skipped"),
        record("a", ToolCallStatus.SUCCEEDED, order=0, name="lookup", output="order 7"),
    ]
    assert build_turn_failure_note(records) == (
        "[Dex] The previous turn failed after these tool calls ran:\n"
        '- lookup {"id":7} -> succeeded: order 7\n'
        '- refund {"id":7} -> failed: The tool call failed: boom\n'
        "Do not repeat these tool calls unless the user asks again."
    )
    assert build_turn_failure_note([record("c", ToolCallStatus.PENDING)]) == ""
    assert build_turn_failure_note([]) == ""


def test_stopped_note_lists_only_calls_that_may_have_run() -> None:
    records = [
        record("a", ToolCallStatus.SUCCEEDED, output="ok"),
        record("b", ToolCallStatus.CANCELLED, order=1),
        record("c", ToolCallStatus.REJECTED, order=2),
        record("d", ToolCallStatus.OUTCOME_UNKNOWN, order=3, error="lost"),
    ]
    note = build_turn_stopped_note(records, how="steered")
    lines = note.splitlines()
    assert lines[0] == "[Dex] The previous turn was steered after these tool calls ran:"
    assert [line.split(" ")[1] for line in lines[1:-1]] == ["lookup", "lookup"]
    assert "-> succeeded: ok" in lines[1] and "-> outcome_unknown:" in lines[2]
    assert build_turn_stopped_note(records[1:3], how="cancelled") == ""


def calls(*ids: str) -> ToolCallsRequested:
    return ToolCallsRequested(
        framework_run_state="state",
        tool_calls=[
            DeferredToolCall(
                tool_call_id=i, tool_name="t", arguments="{}", policy=ToolPolicy(ToolEffect.READ)
            )
            for i in ids
        ],
        usage=AgentUsage(requests=1),
    )


@pytest.mark.parametrize(
    ("ids", "message"),
    [(("",), "empty ID"), (("a/b",), "contains '/'"), (("a", "b", "a"), "repeats")],
)
def test_invalid_tool_call_ids_fail_validation(ids: tuple[str, ...], message: str) -> None:
    with pytest.raises(InvalidRunnerOutputError, match=message):
        validate_outcome(calls(*ids))


def test_ids_may_not_repeat_earlier_calls_of_the_turn() -> None:
    outcome = calls("a", "b")
    assert validate_outcome(outcome) is outcome
    with pytest.raises(InvalidRunnerOutputError, match="'b' repeats"):
        validate_tool_call_ids_unused(outcome, {"b"})
    assert validate_tool_call_ids_unused(outcome, {"c"}) is outcome


def test_run_state_and_calls_are_required() -> None:
    empty_state = ToolCallsRequested(framework_run_state="", tool_calls=calls("a").tool_calls)
    with pytest.raises(InvalidRunnerOutputError, match="framework_run_state"):
        validate_outcome(empty_state)
    with pytest.raises(InvalidRunnerOutputError, match="no tool calls"):
        validate_outcome(ToolCallsRequested(framework_run_state="s", tool_calls=[]))
    with pytest.raises(
        InvalidRunnerOutputError, match="TurnCompleted, ToolCallsRequested or ContinueTurn"
    ):
        validate_outcome("done")  # type: ignore[arg-type]
    done = TurnCompleted(new_messages=[FrameworkMessage(role=MessageRole.ASSISTANT, text="hi")])
    assert validate_outcome(done) is done


def test_user_message_must_have_role_user() -> None:
    ok = FrameworkMessage(role=MessageRole.USER, framework_item={"role": "user"}, text="hi")
    assert validate_user_message(ok) is ok
    with pytest.raises(InvalidRunnerOutputError, match="role user"):
        validate_user_message(FrameworkMessage(role=MessageRole.ASSISTANT, text="hi"))
