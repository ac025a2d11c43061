"""Persistence declarations shared by every agent Flow type.

Naming scheme: the seeds use the same names for some declarations and for value types
(the ``AgentState`` Attribute holds an ``AgentState`` value; likewise ``AgentUsage``). The
value types are exported from ``dex_agents`` under those two names. Every declaration
lives on the ``persistence`` namespace object, whose attributes carry the seeds' names;
the seven whose names no value type holds are exported from ``dex_agents`` as well::

    from dex_agents import AgentState, QueuedUserMessages, persistence

    state: AgentState | None = persistence.AgentState.get(context)
    waiting = QueuedUserMessages.for_one()

The stored names are the constants ``AGENT_STATE`` ... ``AGENT_EVENTS``, whose values are
the seeds' names (``"AgentState"``, ...). The ``AgentEvents`` Stream is declared per
Flow type, as ``flow.agent_events``, because its capacity is a per-agent option.
"""

from __future__ import annotations

from typing import Final

from dex import Attribute, AttributeMap, Channel, ChannelMap

from dex_agents._records import (
    AgentInterrupt,
    AgentInterruptResolution,
    AgentMessage,
    AgentToolCall,
    AgentUserMessage,
    ToolCallCompleted,
    TurnControl,
    UserInputCounts,
)
from dex_agents._records import AgentState as AgentStateValue
from dex_agents._records import AgentUsage as AgentUsageValue

AGENT_STATE: Final = "AgentState"
AGENT_MESSAGES: Final = "AgentMessages"
FRAMEWORK_RUN_STATE: Final = "FrameworkRunState"
AGENT_TOOL_CALLS: Final = "AgentToolCalls"
PENDING_INTERRUPTS: Final = "PendingInterrupts"
AGENT_USAGE: Final = "AgentUsage"
QUEUED_USER_MESSAGES: Final = "QueuedUserMessages"
INTERRUPT_RESOLUTIONS: Final = "InterruptResolutions"
TOOL_CALL_RESULTS: Final = "ToolCallResults"
TURN_CONTROL: Final = "TurnControl"
USER_INPUT_COUNTS: Final = "UserInputCounts"
AGENT_EVENTS: Final = "AgentEvents"


class AgentPersistence:
    """The declarations of an agent session, by the seeds' names.

    Attributes:
        AgentState: Attribute holding the ``AgentState`` value.
        AgentMessages: AttributeMap of ``AgentMessage`` by ``message_sequence_key(n)``.
        FrameworkRunState: Attribute holding the run state while a turn waits for tools.
        AgentToolCalls: AttributeMap of the active turn's ``AgentToolCall`` by tool call ID.
        PendingInterrupts: Attribute holding ``list[AgentInterrupt]``.
        AgentUsage: Attribute holding the session's total ``AgentUsage``.
        QueuedUserMessages: Channel of ``AgentUserMessage`` waiting for a turn.
        InterruptResolutions: ChannelMap of ``AgentInterruptResolution`` by interrupt ID.
        ToolCallResults: internal Channel of ``ToolCallCompleted``.
        TurnControl: internal Channel of steer and cancel requests (beyond the seeds).
        UserInputCounts: internal Attribute counting what RPCs queued and published, which
            tells an idle session from one whose waiting Step holds a message (beyond the
            seeds).

    """

    AgentState: Final = Attribute(AGENT_STATE, AgentStateValue)
    AgentMessages: Final = AttributeMap(AGENT_MESSAGES, AgentMessage)
    FrameworkRunState: Final = Attribute(FRAMEWORK_RUN_STATE, str)
    AgentToolCalls: Final = AttributeMap(AGENT_TOOL_CALLS, AgentToolCall)
    PendingInterrupts: Final[Attribute[list[AgentInterrupt]]] = Attribute(
        PENDING_INTERRUPTS,
        list[AgentInterrupt],
    )
    AgentUsage: Final = Attribute(AGENT_USAGE, AgentUsageValue)
    QueuedUserMessages: Final = Channel(QUEUED_USER_MESSAGES, AgentUserMessage)
    InterruptResolutions: Final = ChannelMap(INTERRUPT_RESOLUTIONS, AgentInterruptResolution)
    ToolCallResults: Final = Channel(TOOL_CALL_RESULTS, ToolCallCompleted)
    TurnControl: Final = Channel(TURN_CONTROL, TurnControl)
    UserInputCounts: Final = Attribute(USER_INPUT_COUNTS, UserInputCounts)


persistence: Final = AgentPersistence()
"""The shared declarations (see ``AgentPersistence``)."""

# The declarations whose names no value type holds, also at module level so that
# ``dex_agents`` exports them under the seeds' names (``QueuedUserMessages.for_one()``).
AgentMessages: Final = persistence.AgentMessages
FrameworkRunState: Final = persistence.FrameworkRunState
AgentToolCalls: Final = persistence.AgentToolCalls
PendingInterrupts: Final = persistence.PendingInterrupts
QueuedUserMessages: Final = persistence.QueuedUserMessages
InterruptResolutions: Final = persistence.InterruptResolutions
ToolCallResults: Final = persistence.ToolCallResults
