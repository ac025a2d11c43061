from __future__ import annotations

import asyncio

from dex_agents import AgentEvent, AgentEventType, AgentSessionClient, MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT

from tests.agent_defs import MODEL_KIND, tool_kind
from tests.conftest import ScenarioFactory, final_answer, wait_idle


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


async def test_parallel_tool_calls_run_as_steps_and_the_turn_stores_every_item(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("turn-1", "look up my order and add a note")
        events = await events_until_turn_completed(s.sessions, "turn-1")
        snapshot = await wait_idle(s.sessions, "turn-1", turns=1)

        # The SDK's own tool functions ran once each, in their own Steps.
        assert s.log.count(tool_kind("lookup_order")) == 1
        assert s.log.keys(tool_kind("add_note")) == ["turn-1/turn-1/call_1_0_1"]
        assert s.log.count(MODEL_KIND) == 2
        history = await s.stack.read_step_history("turn-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("RunModel") == 2
        assert executed.count("CallTool") == 2

        # Every item of the turn, in order, as Responses input items.
        kinds = [(m.role, m.framework_item.get("type")) for m in snapshot.messages]
        assert kinds == [
            (MessageRole.USER, None),
            (MessageRole.ASSISTANT, "reasoning"),
            (MessageRole.ASSISTANT, "message"),
            (MessageRole.ASSISTANT, "function_call"),
            (MessageRole.ASSISTANT, "function_call"),
            (MessageRole.TOOL, "function_call_output"),
            (MessageRole.TOOL, "function_call_output"),
            (MessageRole.ASSISTANT, "message"),
        ]
        assert final_answer(snapshot) == (
            'lookup_order: {"order_id":7,"status":"shipped","total":42}\n'
            "add_note: note added to order 7 with key turn-1/turn-1/call_1_0_1"
        )

        # Text and reasoning were streamed; usage was recorded once per model call.
        texts = "".join(e.data["text"] for e in events if e.type is AgentEventType.TEXT_DELTA)
        assert texts.startswith("Let me check.")
        assert any(e.type is AgentEventType.REASONING_DELTA for e in events)
        recorded = [e for e in events if e.type is AgentEventType.USAGE_RECORDED]
        assert len(recorded) == 2
        assert snapshot.usage.requests == 2
        assert snapshot.usage.input_tokens > 0


async def test_a_tool_execution_error_is_a_failed_call_the_model_sees(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("stock-1", "is the kettle in stock?")
        snapshot = await wait_idle(s.sessions, "stock-1", turns=1)
        assert s.log.count(tool_kind("check_stock")) == 1  # not retried
        assert final_answer(snapshot) == (
            "check_stock: The tool call failed: the inventory service does not know 'kettle'"
        )
        history = await s.stack.read_step_history("stock-1")
        calls = [e for e in history if e.step_type == "CallTool"]
        assert [e.final_attempt for e in calls] == [1]


async def test_an_error_the_sdk_handles_is_a_failed_call_that_runs_once(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        # A read whose tool raises under the SDK's default failure_error_function: the
        # plain SDK runs it once and shows the model its error text; so does the session.
        await s.sessions.start_session("track-1", "track the parcel please")
        snapshot = await wait_idle(s.sessions, "track-1", turns=1)
        assert s.log.count(tool_kind("track_parcel")) == 1
        [record] = [m for m in snapshot.messages if m.role is MessageRole.TOOL]
        assert record.text == (
            "The tool call failed: An error occurred while running the tool. Please try again."
        )
        history = await s.stack.read_step_history("track-1")
        calls = [e for e in history if e.step_type == "CallTool"]
        assert [e.final_attempt for e in calls] == [1]
        assert "RecordToolFailure" not in {e.step_type for e in history}
