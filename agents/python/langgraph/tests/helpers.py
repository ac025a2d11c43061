"""Small waits and readers shared by the integration tests."""

from __future__ import annotations

import asyncio

from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSnapshot,
    AgentStatus,
    MessageRole,
)
from dex_agents.testing import wait_for_agent_snapshot


def is_idle_after(snapshot: AgentSnapshot, turns: int) -> bool:
    state = snapshot.state
    return (
        state is not None
        and state.turn_count >= turns
        and state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
        and state.active_turn_id is None
        and snapshot.queued_message_count == 0
    )


async def wait_idle(
    sessions: AgentSessionClient, session_id: str, *, turns: int, timeout: float = 30.0
) -> AgentSnapshot:
    """Wait until ``turns`` turns ended and the session waits for a user message."""
    return await wait_for_agent_snapshot(
        sessions,
        session_id,
        lambda snapshot: snapshot if is_idle_after(snapshot, turns) else None,
        description=f"session {session_id} idle after {turns} turn(s)",
        timeout=timeout,
    )


def final_answer(snapshot: AgentSnapshot) -> str:
    """The text of the last assistant message (the turn's answer)."""
    answers = [m.text for m in snapshot.messages if m.role is MessageRole.ASSISTANT]
    assert answers, f"no assistant message in {snapshot.messages}"
    return answers[-1]


async def events_until_turn_completed(
    sessions: AgentSessionClient, session_id: str, *, turns: int = 1
) -> list[AgentEvent]:
    """Every event of the session up to its ``turns``-th ``turn_completed``."""
    events: list[AgentEvent] = []

    async def collect() -> None:
        completed = 0
        async for event in sessions.follow_events(session_id):
            events.append(event)
            if event.type is AgentEventType.TURN_COMPLETED:
                completed += 1
                if completed == turns:
                    return

    await asyncio.wait_for(collect(), timeout=30)
    return events
