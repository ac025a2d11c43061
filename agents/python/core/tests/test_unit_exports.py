from __future__ import annotations

import dex
import dex_agents
import pytest

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
    "AgentMessages",
    "AgentPersistence",
    "AgentToolCalls",
    "FrameworkRunState",
    "InterruptResolutions",
    "PendingInterrupts",
    "QueuedUserMessages",
    "ToolCallResults",
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
    "ContinueTurn",
    "ModelStepOutcome",
    "DEFAULT_MAX_MODEL_CALLS_PER_TURN",
    "MAX_CONTINUE_REASON_LENGTH",
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
    "SourceTool",
    "ToolSource",
    "CallableSecrets",
    "Connector",
    "ConnectorCallError",
    "ConnectorManifestError",
    "ConnectorOperation",
    "ConnectorSecret",
    "ConnectorSecretError",
    "ConnectorToolSource",
    "EnvSecrets",
    "FileSecrets",
    "OpenAPIConnector",
    "SecretProvider",
    "TurnCompleted",
    "TurnControl",
    "TurnControlKind",
    "build_turn_failure_note",
    "build_turn_stopped_note",
    "current_tool_execution",
    "describe_tool_call_outcome",
    "is_approval_required",
    "message_sequence_key",
    "IDEMPOTENCY_KEY_META",
    "InterruptKind",
    "MCPToolSource",
    "ToolInputAnswer",
    "ToolInputRequired",
    "ToolQuestion",
    "persistence",
    "ApprovalReceipt",
    "InvalidApprovalError",
    "ReconcileResult",
    "ReconcileToolCallRequest",
    "Reconciler",
    "ToolCallReconciliation",
    "canonical_arguments_sha256",
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


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("AgentMessages", dex.AttributeMap),
        ("FrameworkRunState", dex.Attribute),
        ("AgentToolCalls", dex.AttributeMap),
        ("PendingInterrupts", dex.Attribute),
        ("QueuedUserMessages", dex.Channel),
        ("InterruptResolutions", dex.ChannelMap),
        ("ToolCallResults", dex.Channel),
    ],
)
def test_declarations_without_a_value_type_are_exported_by_their_seed_names(
    name: str, kind: type
) -> None:
    exported = getattr(dex_agents, name)
    assert isinstance(exported, kind)
    assert exported is getattr(dex_agents.persistence, name)
    assert exported.name == name


def test_value_types_keep_the_names_agent_state_and_agent_usage() -> None:
    # One module cannot export two things under one name: the value types win, and the
    # two Attributes stay reachable through the persistence namespace.
    assert isinstance(dex_agents.AgentState(), dex_agents.AgentState)
    assert isinstance(dex_agents.AgentUsage(), dex_agents.AgentUsage)
    assert isinstance(dex_agents.persistence.AgentState, dex.Attribute)
    assert isinstance(dex_agents.persistence.AgentUsage, dex.Attribute)


def test_the_seed_wait_conditions_build_from_the_exports() -> None:
    from dex_agents import InterruptResolutions, QueuedUserMessages, ToolCallResults

    one = QueuedUserMessages.for_one()
    answer = InterruptResolutions.for_one("turn-1:call-1")
    results = ToolCallResults.for_n(2)
    assert (one.name, one.min_count, one.max_count) == ("QueuedUserMessages", 1, 1)
    assert (answer.name, answer.min_count, answer.max_count) == ("InterruptResolutions", 1, 1)
    assert answer.channel != InterruptResolutions.for_one("turn-1:call-2").channel
    assert (results.name, results.min_count, results.max_count) == ("ToolCallResults", 2, 2)
