from __future__ import annotations

import asyncio

from dex_agents import AgentEvent, AgentEventType, AgentSessionClient

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def events_until_turn_completed(
    sessions: AgentSessionClient, session_id: str
) -> list[AgentEvent]:
    events: list[AgentEvent] = []

    async def collect() -> None:
        async for event in sessions.follow_events(session_id):
            events.append(event)
            if event.type is AgentEventType.TURN_COMPLETED:
                return

    await asyncio.wait_for(collect(), timeout=30)
    return events


def live_text(events: list[AgentEvent]) -> dict[str, str]:
    """A UI's view: per Step execution, only the text of the highest attempt seen."""
    best: dict[str, tuple[int, str]] = {}
    for event in events:
        if event.type is not AgentEventType.TEXT_DELTA:
            continue
        attempt, text = best.get(event.step_execution_id, (0, ""))
        if event.attempt > attempt:
            attempt, text = event.attempt, ""
        if event.attempt == attempt:
            best[event.step_execution_id] = (attempt, text + event.data["text"])
    return {key: text for key, (_, text) in best.items()}


async def test_events_come_in_order_and_group_by_attempt(scenario: ScenarioFactory) -> None:
    async with scenario("events") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("events-1", "where is order 7?")
        events = await events_until_turn_completed(s.sessions, "events-1")
        snapshot = await wait_idle(s.sessions, "events-1", turns=1)

        assert {e.turn_id for e in events} == {"turn-1"}
        kinds = [e.type for e in events]
        milestones = [
            AgentEventType.TURN_STARTED,
            AgentEventType.TOOL_CALL_DEFERRED,
            AgentEventType.TOOL_CALL_STARTED,
            AgentEventType.TOOL_CALL_FINISHED,
            AgentEventType.TURN_COMPLETED,
        ]
        positions = [kinds.index(kind) for kind in milestones]
        assert positions == sorted(positions), kinds
        assert kinds.count(AgentEventType.USAGE_RECORDED) == 2  # one per successful model call

        started = events[kinds.index(AgentEventType.TOOL_CALL_STARTED)]
        finished = events[kinds.index(AgentEventType.TOOL_CALL_FINISHED)]
        assert started.step_execution_id.startswith("CallTool-")
        assert started.data == {"tool_call_id": "call-0-0", "tool_name": "lookup_order"}
        assert finished.data["status"] == "succeeded"

        # The second model call failed once after streaming part of its answer: its
        # attempts share one step_execution_id, and the highest attempt wins.
        deltas = [e for e in events if e.type is AgentEventType.TEXT_DELTA]
        assert {(e.data["text"], e.attempt) for e in deltas} == {("all ", 1), ("all done", 2)}
        assert len({e.step_execution_id for e in deltas}) == 1
        assert live_text(events) == {deltas[0].step_execution_id: "all done"}
        assert assistant_texts(snapshot) == ["all done"]
        completed = events[-1]
        assert completed.data["message_count"] == len(snapshot.messages)
