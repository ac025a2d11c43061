"""Small waits shared by the integration tests."""

from __future__ import annotations

from dex_agents import AgentSessionClient, AgentSnapshot, AgentStatus, MessageRole
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


def assistant_texts(snapshot: AgentSnapshot) -> list[str]:
    return [
        m.text
        for m in snapshot.messages
        if m.role is MessageRole.ASSISTANT and m.framework_item.get("type") == "text"
    ]
