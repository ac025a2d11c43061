from __future__ import annotations

import asyncio

from dex_agents import AgentEvent, AgentEventType, AgentStatus, MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, MODEL_CALL_KIND

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_a_plain_turn_stores_the_exchange_and_usage(scenario: ScenarioFactory) -> None:
    async with scenario("router") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("plain-1", "hello there")
        snapshot = await wait_idle(s.sessions, "plain-1", turns=1)

        assert snapshot.state is not None
        assert snapshot.state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
        assert snapshot.state.last_turn_error is None
        assert [(m.sequence, m.role, m.text) for m in snapshot.messages] == [
            (1, MessageRole.USER, "hello there"),
            (2, MessageRole.ASSISTANT, "echo: hello there"),
        ]
        assert all(m.turn_id == "turn-1" for m in snapshot.messages)
        assert snapshot.usage.requests == 1
        assert snapshot.tool_calls == []
        assert s.log.count(MODEL_CALL_KIND) == 1

        # A second message starts the second turn; the model sees the whole conversation.
        assert await s.sessions.send_user_message("plain-1", "and again")
        snapshot = await wait_idle(s.sessions, "plain-1", turns=2)
        assert assistant_texts(snapshot) == ["echo: hello there", "echo: and again"]
        assert snapshot.usage.requests == 2

        history = await s.stack.read_step_history("plain-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        # The idle session's send_user_message opened turn 2 and scheduled its RunModel in
        # its own commit: AwaitUserMessage waited (its wait_for is in history), then was
        # cancelled without executing.
        assert executed == ["StartAgentSession", "RunModel", "RunModel"]
        waited = [e.step_type for e in history if e.event_type == "StepWaitForCompleted"]
        assert waited.count("AwaitUserMessage") == 2

        # turn 2's first RunModel announced it, with the sequence of its user message
        events: list[AgentEvent] = []

        async def collect() -> None:
            async for event in s.sessions.follow_events("plain-1"):
                events.append(event)
                if event.type is AgentEventType.TURN_COMPLETED and event.turn_id == "turn-2":
                    return

        await asyncio.wait_for(collect(), timeout=30)
        started = [e for e in events if e.type is AgentEventType.TURN_STARTED]
        assert [(e.turn_id, e.data) for e in started] == [
            ("turn-1", {"sequence": 1}),
            ("turn-2", {"sequence": 3}),
        ]
        assert started[1].step_execution_id.startswith("RunModel-")
        assert snapshot.state is not None and not snapshot.state.turn_start_unannounced


async def test_a_session_without_initial_message_waits_for_one(scenario: ScenarioFactory) -> None:
    async with scenario("router") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("plain-2")
        snapshot = await wait_idle(s.sessions, "plain-2", turns=0)
        assert snapshot.messages == []
        assert snapshot.state is not None and snapshot.state.turn_count == 0

        assert await s.sessions.send_user_message("plain-2", "first words")
        snapshot = await wait_idle(s.sessions, "plain-2", turns=1)
        assert assistant_texts(snapshot) == ["echo: first words"]
