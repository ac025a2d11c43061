"""dex-agents: durable AI-agent sessions on Dex.

One ``AgentSessionFlow`` execution is one agent session (the Flow ID is the session ID).
A framework adapter implements ``AgentFrameworkRunner``; the session runs every model call
and every tool call as its own Step. ``AgentSessionClient`` starts sessions, sends
messages, resolves approvals, steers and cancels turns, and reads snapshots and events.
"""

from dex_agents._enums import (
    AgentEventType,
    AgentStatus,
    MessageRole,
    ToolCallStatus,
    ToolEffect,
    TurnControlKind,
)
from dex_agents._events import AgentEventWriter
from dex_agents._policy import AgentSessionOptions, ToolPolicy, is_approval_required
from dex_agents._records import (
    AgentEvent,
    AgentInterrupt,
    AgentInterruptResolution,
    AgentMessage,
    AgentMessagesPage,
    AgentSessionStartInput,
    AgentSnapshot,
    AgentState,
    AgentToolCall,
    AgentUsage,
    AgentUserMessage,
    FrameworkMessage,
    ListAgentMessagesRequest,
    ResolveInterruptRequest,
    ToolCallCompleted,
    TurnControl,
)
from dex_agents._runner import (
    AgentFrameworkRunner,
    AgentTurnContext,
    AgentTurnOutcome,
    DeferredToolCall,
    DeferredToolExecution,
    ToolCallsRequested,
    ToolExecutionError,
    ToolExecutionResult,
    TurnCompleted,
)
from dex_agents._text import (
    InvalidRunnerOutputError,
    build_turn_failure_note,
    build_turn_stopped_note,
    describe_tool_call_outcome,
    message_sequence_key,
)

__all__ = [
    "AgentEvent",
    "AgentEventType",
    "AgentEventWriter",
    "AgentFrameworkRunner",
    "AgentInterrupt",
    "AgentInterruptResolution",
    "AgentMessage",
    "AgentMessagesPage",
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
    "describe_tool_call_outcome",
    "is_approval_required",
    "message_sequence_key",
]
