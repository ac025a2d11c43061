from __future__ import annotations

import json

from dex_agents import AgentEventType, MessageRole
from dex_agents.testing import MODEL_CALL_KIND, tool_call_kind

from tests.conftest import ScenarioFactory
from tests.helpers import events_until_turn_completed, final_answer, wait_idle


async def test_a_plain_turn_streams_and_stores_langchain_messages(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("plain-1", "hello there")
        snapshot = await wait_idle(s.sessions, "plain-1", turns=1)

        assert final_answer(snapshot) == "echo: hello there"
        items = [m.framework_item for m in snapshot.messages]
        assert [i["type"] for i in items] == ["human", "ai"]
        assert items[1]["data"]["additional_kwargs"] == {"reasoning_content": "Nothing to look up."}
        assert snapshot.usage.requests == 1
        assert snapshot.usage.output_tokens > 0
        assert s.log.count(MODEL_CALL_KIND) == 1

        events = await events_until_turn_completed(s.sessions, "plain-1")
        text = "".join(str(e.data["text"]) for e in events if e.type is AgentEventType.TEXT_DELTA)
        reasoning = [e for e in events if e.type is AgentEventType.REASONING_DELTA]
        assert text == "echo: hello there"
        assert [e.data["text"] for e in reasoning] == ["Nothing to look up."]


async def test_a_tool_turn_defers_the_read_and_resumes_with_its_result(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("read-1", "where is my order?")
        snapshot = await wait_idle(s.sessions, "read-1", turns=1)

        key = "read-1/turn-1/call_0_0_0"
        assert s.log.keys(tool_call_kind("lookup_order")) == [key]
        assert s.log.keys(MODEL_CALL_KIND) == ["0/0", "0/1"]
        order = json.dumps({"order_id": 7, "status": "shipped", "total": 42})
        assert final_answer(snapshot) == f"lookup_order#call_0_0_0: success: {order}"
        assert [m.role for m in snapshot.messages] == [
            MessageRole.USER,
            MessageRole.ASSISTANT,
            MessageRole.TOOL,
            MessageRole.ASSISTANT,
        ]
        tool_item = snapshot.messages[2].framework_item
        assert tool_item["data"]["tool_call_id"] == "call_0_0_0"
        assert snapshot.usage.requests == 2
        assert snapshot.tool_calls == []  # records are deleted when the turn ends
