from __future__ import annotations

from dex_agents import MessageRole

from tests.agent_defs import MODEL_KIND, tool_kind
from tests.conftest import ScenarioFactory, final_answer, wait_idle


async def test_the_second_turn_sees_the_first_after_a_worker_restart(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("multi-1", "where is my order?")
        first = await wait_idle(s.sessions, "multi-1", turns=1)
        assert final_answer(first) == ('lookup_order: {"order_id":7,"status":"shipped","total":42}')

        # A new Worker process rebuilds the SDK input from the stored framework items.
        worker.kill()
        await s.stack.start_worker()
        assert await s.sessions.send_user_message("multi-1", "do you remember what you found?")
        second = await wait_idle(s.sessions, "multi-1", turns=2)

        assert final_answer(second) == (
            'earlier tool outputs: [\'{"order_id":7,"status":"shipped","total":42}\']'
        )
        assert s.log.count(tool_kind("lookup_order")) == 1
        assert s.log.count(MODEL_KIND, "2/0") == 1
        roles = [m.role for m in second.messages]
        assert roles.count(MessageRole.USER) == 2
        # Turn 1's items came back unchanged: the stored items are the SDK's own.
        assert second.messages[: len(first.messages)] == first.messages
