"""Play the session around a runner in one process (no server): contexts and records."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from dex_agents import (
    AgentEvent,
    AgentEventWriter,
    AgentMessage,
    AgentSessionOptions,
    AgentToolCall,
    AgentTurnContext,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    ToolCallStatus,
)


class Events:
    """An ``AgentEventWriter`` whose events land in a list."""

    def __init__(self) -> None:
        self.seen: list[AgentEvent] = []
        self.writer = AgentEventWriter(
            self.seen.append, turn_id="turn-1", step_execution_id="RunModel-1", attempt=1
        )

    async def settle(self) -> list[AgentEvent]:
        self.writer.close()
        await asyncio.sleep(0)
        return self.seen


async def _beat() -> None:
    return None


def stored(messages: Sequence[FrameworkMessage], turn_id: str = "turn-1") -> list[AgentMessage]:
    return [
        AgentMessage(
            sequence=i + 1,
            turn_id=turn_id,
            role=m.role,
            framework_item=m.framework_item,
            text=m.text,
        )
        for i, m in enumerate(messages)
    ]


def turn_context(
    messages: Sequence[AgentMessage],
    *,
    events: Events,
    state: str | None = None,
    records: Sequence[AgentToolCall] = (),
    options: AgentSessionOptions | None = None,
) -> AgentTurnContext:
    return AgentTurnContext(
        flow_id="s1",
        turn_id="turn-1",
        attempt=1,
        messages=list(messages),
        framework_run_state=state,
        tool_calls={r.tool_call_id: r for r in records},
        events=events.writer,
        heartbeat=_beat,
        options=options or AgentSessionOptions(),
    )


def record(
    call: DeferredToolCall,
    order: int,
    status: ToolCallStatus,
    *,
    output: str | None = None,
    rejection_message: str | None = None,
) -> AgentToolCall:
    return AgentToolCall(
        tool_call_id=call.tool_call_id,
        turn_id="turn-1",
        tool_name=call.tool_name,
        arguments=call.arguments,
        effect=call.policy.effect,
        requires_approval=False,
        deferral_order=order,
        status=status,
        idempotency_key=f"s1/turn-1/{call.tool_call_id}",
        output=output,
        rejection_message=rejection_message,
    )


def execution(call: AgentToolCall, events: Events) -> DeferredToolExecution:
    return DeferredToolExecution(
        flow_id="s1",
        tool_call=call,
        idempotency_key=call.idempotency_key,
        attempt=1,
        events=events.writer,
        heartbeat=_beat,
    )
