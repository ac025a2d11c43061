"""ContinueTurn: a model call that neither answers nor asks for tools, in its own Step."""

from __future__ import annotations

import asyncio

from dex_agents import AgentEvent, AgentEventType, AgentSessionClient, MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, MODEL_CALL_KIND, FileGate, tool_call_kind

from tests.agent_defs import CONTINUE_LOOP_LIMIT
from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def turn_events(
    sessions: AgentSessionClient, session_id: str, ends: AgentEventType, *, count: int = 1
) -> list[AgentEvent]:
    """Every event of the session up to its ``count``-th event of type ``ends``."""
    events: list[AgentEvent] = []

    async def collect() -> None:
        seen = 0
        async for event in sessions.follow_events(session_id):
            events.append(event)
            if event.type is ends:
                seen += 1
                if seen == count:
                    return

    await asyncio.wait_for(collect(), timeout=30)
    return events


async def test_a_continued_turn_survives_a_kill_in_its_second_model_call(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("continue") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("continue-1", "is order 7 paid?")

        gate = FileGate(s.state_dir, "continue-1")
        await gate.wait_until_reached()
        worker.kill()  # SIGKILL inside the second RunModel, after the first one committed
        gate.release()
        await s.stack.start_worker()

        snapshot = await wait_idle(s.sessions, "continue-1", turns=1)
        assert snapshot.state is not None and snapshot.state.last_turn_error is None
        assert snapshot.state.turn_model_calls == 0
        # Both calls' items, in order, appended once by the final answer.
        assert [(m.role, m.text) for m in snapshot.messages] == [
            (MessageRole.USER, "is order 7 paid?"),
            (MessageRole.ASSISTANT, "Handing you to billing."),
            (MessageRole.ASSISTANT, "billing: order 7 is paid"),
        ]
        assert snapshot.usage.requests == 2  # each model call's usage, counted once

        # The handoff ran once; only the killed call ran again.
        assert s.log.count(MODEL_CALL_KIND, "continue-1/turn-1/0") == 1
        assert s.log.count(MODEL_CALL_KIND, "continue-1/turn-1/1") == 2
        history = await s.stack.read_step_history("continue-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed == ["StartAgentSession", "RunModel", "RunModel"]
        run_models = [e for e in history if e.step_type == "RunModel"]
        assert len({e.step_execution_id for e in run_models}) == 2

        events = await turn_events(s.sessions, "continue-1", AgentEventType.TURN_COMPLETED)
        continued = [e for e in events if e.type is AgentEventType.TURN_CONTINUED]
        assert [e.data for e in continued] == [{"reason": "handoff", "model_calls": 1}]
        assert continued[0].step_execution_id.startswith("RunModel-")
        assert [e.type for e in events].count(AgentEventType.USAGE_RECORDED) == 2


async def test_a_continue_after_tools_keeps_their_results(scenario: ScenarioFactory) -> None:
    async with scenario("continue") as s:
        FileGate(s.state_dir, "continue-1").release()
        await s.stack.start_worker()
        await s.sessions.start_session("continue-2", "first")
        await wait_idle(s.sessions, "continue-2", turns=1)
        assert await s.sessions.send_user_message("continue-2", "look up order 7")
        snapshot = await wait_idle(s.sessions, "continue-2", turns=2)

        assert snapshot.state is not None and snapshot.state.last_turn_error is None
        assert assistant_texts(snapshot)[-1] == (
            'retried; saw {"order_id": 7, "status": "shipped", "total": 42}'
        )
        assert s.log.count(tool_call_kind("lookup_order")) == 1
        for index in range(3):
            assert s.log.count(MODEL_CALL_KIND, f"continue-2/turn-2/{index}") == 1
        history = await s.stack.read_step_history("continue-2")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed[-5:] == ["RunModel", "CallTool", "ResumeTurn", "RunModel", "RunModel"]


async def test_a_turn_that_keeps_continuing_fails_at_the_limit(scenario: ScenarioFactory) -> None:
    async with scenario("continue_loop") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("loop-1", "go round")
        snapshot = await wait_idle(s.sessions, "loop-1", turns=1)

        assert snapshot.state is not None
        error = snapshot.state.last_turn_error or ""
        assert "max_model_calls_per_turn" in error and f"({CONTINUE_LOOP_LIMIT})" in error
        assert s.log.count(MODEL_CALL_KIND) == CONTINUE_LOOP_LIMIT  # never a call past it
        assert snapshot.usage.requests == CONTINUE_LOOP_LIMIT
        events = await turn_events(s.sessions, "loop-1", AgentEventType.TURN_FAILED)
        assert [
            e.data["model_calls"] for e in events if e.type is AgentEventType.TURN_CONTINUED
        ] == [
            1,
            2,
            3,
        ]
        assert events[-1].data == {"error": error}

        # The next turn starts counting again.
        assert await s.sessions.send_user_message("loop-1", "again")
        snapshot = await wait_idle(s.sessions, "loop-1", turns=2)
        assert snapshot.state is not None and snapshot.state.last_turn_error is None
        assert assistant_texts(snapshot) == ["answered: again"]
