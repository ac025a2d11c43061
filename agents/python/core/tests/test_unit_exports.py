from __future__ import annotations

import dex_agents

EXPECTED = {
    "AGENT_EVENTS",
    "AGENT_MESSAGES",
    "AGENT_STATE",
    "AGENT_TOOL_CALLS",
    "AGENT_USAGE",
    "FRAMEWORK_RUN_STATE",
    "INTERRUPT_RESOLUTIONS",
    "PENDING_INTERRUPTS",
    "QUEUED_USER_MESSAGES",
    "TOOL_CALL_RESULTS",
    "TURN_CONTROL",
    "AgentEvent",
    "AgentEventMessage",
    "AgentEventType",
    "AgentEventWriter",
    "AgentFrameworkRunner",
    "AgentInterrupt",
    "AgentInterruptResolution",
    "AgentMessage",
    "AgentMessagesPage",
    "AgentPersistence",
    "AgentSessionClient",
    "AgentSessionFlow",
    "AgentSessionOptions",
    "AgentSessionStartInput",
    "AgentSnapshot",
    "AgentState",
    "AgentStatus",
    "AgentToolCall",
    "AgentTurnContext",
    "AgentTurnOutcome",
    "AgentUsage",
    "AgentUserMessage",
    "DeferredToolCall",
    "DeferredToolExecution",
    "FrameworkMessage",
    "InvalidRunnerOutputError",
    "ListAgentMessagesRequest",
    "MessageRole",
    "ResolveInterruptRequest",
    "ToolCallCompleted",
    "ToolCallStatus",
    "ToolCallsRequested",
    "ToolEffect",
    "ToolExecutionError",
    "ToolExecutionResult",
    "ToolPolicy",
    "TurnCompleted",
    "TurnControl",
    "TurnControlKind",
    "build_turn_failure_note",
    "build_turn_stopped_note",
    "current_tool_execution",
    "describe_tool_call_outcome",
    "is_approval_required",
    "message_sequence_key",
    "persistence",
}


def test_exported_names_are_pinned() -> None:
    assert set(dex_agents.__all__) == EXPECTED
    assert len(dex_agents.__all__) == len(EXPECTED)
    for name in dex_agents.__all__:
        assert getattr(dex_agents, name) is not None
        assert not name.startswith("_")


def test_persistence_declarations_carry_the_seed_names() -> None:
    p = dex_agents.persistence
    names = {
        p.AgentState.name,
        p.AgentMessages.name,
        p.FrameworkRunState.name,
        p.AgentToolCalls.name,
        p.PendingInterrupts.name,
        p.AgentUsage.name,
        p.QueuedUserMessages.name,
        p.InterruptResolutions.name,
        p.ToolCallResults.name,
        p.TurnControl.name,
    }
    assert names == {
        "AgentState",
        "AgentMessages",
        "FrameworkRunState",
        "AgentToolCalls",
        "PendingInterrupts",
        "AgentUsage",
        "QueuedUserMessages",
        "InterruptResolutions",
        "ToolCallResults",
        "TurnControl",
    }
    assert p.AgentState.value_type is dex_agents.AgentState
    assert p.AgentUsage.value_type is dex_agents.AgentUsage
