"""The guide's call shapes of the runner contract's values: positional, in its order."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dex_agents import (
    AgentEventWriter,
    AgentInterruptResolution,
    AgentSessionOptions,
    AgentSessionStartInput,
    AgentToolCall,
    AgentTurnContext,
    AgentUsage,
    AgentUserMessage,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    InvalidRunnerOutputError,
    ListAgentMessagesRequest,
    MessageRole,
    ResolveInterruptRequest,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolPolicy,
    TurnCompleted,
)
from dex_agents._text import validate_outcome
from dex_agents.testing import StepHistoryEntry

POLICY = ToolPolicy(ToolEffect.READ)
USAGE = AgentUsage(requests=1, input_tokens=3, output_tokens=2, total_tokens=5)


async def _beat() -> None:
    return None


def _writer() -> AgentEventWriter:
    return AgentEventWriter(
        lambda event: None,
        turn_id="turn-1",
        step_execution_id="RunModel-1",
        attempt=1,
    )


def test_deferred_tool_call_takes_id_name_arguments_policy() -> None:
    call = DeferredToolCall("call-1", "search_tickets", '{"q": "open"}', POLICY)
    assert (call.tool_call_id, call.tool_name, call.arguments, call.policy) == (
        "call-1",
        "search_tickets",
        '{"q": "open"}',
        POLICY,
    )
    assert call == DeferredToolCall(
        tool_call_id="call-1", tool_name="search_tickets", arguments='{"q": "open"}', policy=POLICY
    )


def test_tool_calls_requested_takes_run_state_calls_usage() -> None:
    calls = [DeferredToolCall("call-1", "search_tickets", "{}", POLICY)]
    requested = ToolCallsRequested('{"run": 1}', calls, USAGE)
    assert (requested.framework_run_state, requested.tool_calls, requested.usage) == (
        '{"run": 1}',
        calls,
        USAGE,
    )
    assert ToolCallsRequested('{"run": 1}', calls).usage is None


def test_turn_completed_takes_messages_usage() -> None:
    messages = [FrameworkMessage(MessageRole.ASSISTANT, {"text": "done"}, "done")]
    completed = TurnCompleted(messages, USAGE)
    assert (completed.new_messages, completed.usage) == (messages, USAGE)
    assert TurnCompleted(messages).usage is None
    assert TurnCompleted(messages, None).usage is None


def test_tool_execution_result_and_error_take_their_text() -> None:
    assert ToolExecutionResult("3 tickets").output == "3 tickets"
    error = ToolExecutionError("no such order")
    assert (str(error), error.message) == ("no such order", "no such order")


def test_framework_message_takes_role_item_text() -> None:
    message = FrameworkMessage(MessageRole.USER, {"text": "hi"}, "hi")
    assert (message.role, message.framework_item, message.text) == (
        MessageRole.USER,
        {"text": "hi"},
        "hi",
    )
    assert FrameworkMessage(MessageRole.USER) == FrameworkMessage(
        role=MessageRole.USER, framework_item=None, text=""
    )


def test_requests_and_inputs_take_their_fields_in_order() -> None:
    assert AgentUserMessage("hello").text == "hello"
    assert AgentSessionStartInput("hi").initial_message == "hi"
    assert AgentSessionStartInput().initial_message is None
    request = ResolveInterruptRequest("turn-1:call-1", False, "too much")
    assert (request.interrupt_id, request.approved, request.rejection_message) == (
        "turn-1:call-1",
        False,
        "too much",
    )
    answer = AgentInterruptResolution("turn-1:call-1", True)
    assert (answer.interrupt_id, answer.approved, answer.rejection_message) == (
        "turn-1:call-1",
        True,
        None,
    )
    listing = ListAgentMessagesRequest(10, 5)
    assert (listing.after_sequence, listing.limit) == (10, 5)


def test_session_options_take_the_guides_order() -> None:
    options = AgentSessionOptions(
        {"search_tickets": POLICY}, ToolEffect.READ, 1024, timedelta(hours=1)
    )
    assert options.tool_policies == {"search_tickets": POLICY}
    assert options.default_tool_effect is ToolEffect.READ
    assert options.agent_events_capacity_bytes == 1024
    assert options.interrupt_deadline == timedelta(hours=1)


def test_step_history_entry_takes_event_step_execution_attempt() -> None:
    entry = StepHistoryEntry("StepExecuteCompleted", "CallTool", "CallTool-1", 2)
    assert (entry.event_type, entry.step_type, entry.step_execution_id, entry.final_attempt) == (
        "StepExecuteCompleted",
        "CallTool",
        "CallTool-1",
        2,
    )


async def test_contexts_take_the_guides_field_order() -> None:
    writer = _writer()
    turn = AgentTurnContext("s-1", "turn-1", 1, [], None, {}, writer, _beat, AgentSessionOptions())
    assert (turn.flow_id, turn.turn_id, turn.attempt, turn.is_resuming) == (
        "s-1",
        "turn-1",
        1,
        False,
    )
    record = AgentToolCall(
        tool_call_id="call-1",
        turn_id="turn-1",
        tool_name="search_tickets",
        arguments="{}",
        effect=ToolEffect.READ,
        requires_approval=False,
        deferral_order=0,
        status=ToolCallStatus.APPROVED,
        idempotency_key="s-1/turn-1/call-1",
    )
    call = DeferredToolExecution("s-1", record, "s-1/turn-1/call-1", 2, writer, _beat)
    assert (call.flow_id, call.tool_call, call.idempotency_key, call.attempt) == (
        "s-1",
        record,
        "s-1/turn-1/call-1",
        2,
    )


def test_usage_none_is_valid_output_and_other_usage_is_not() -> None:
    calls = [DeferredToolCall("call-1", "search_tickets", "{}", POLICY)]
    assert validate_outcome(TurnCompleted([], None)).usage is None
    assert validate_outcome(ToolCallsRequested("state", calls, None)).usage is None
    with pytest.raises(InvalidRunnerOutputError, match="usage"):
        validate_outcome(TurnCompleted([], {"requests": 1}))  # type: ignore[arg-type]
