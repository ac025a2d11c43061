from __future__ import annotations

import json

from dex_agents.testing import MODEL_CALL_KIND

from tests.conftest import ScenarioFactory
from tests.helpers import final_answer, wait_idle


async def test_the_second_turn_sees_the_first_after_a_worker_restart(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("multi-1", "where is my order?")
        first = await wait_idle(s.sessions, "multi-1", turns=1)
        first_answer = final_answer(first)

        # A new Worker process rebuilds the conversation from the stored items only.
        worker.kill()
        await s.stack.start_worker()
        assert await s.sessions.send_user_message("multi-1", "what did you tell me earlier?")
        second = await wait_idle(s.sessions, "multi-1", turns=2)

        # The system prompt, human, ai (tool call), tool, ai, then the new human message.
        assert final_answer(second) == (
            f"I saw 6 messages; tools ['lookup_order']; answers {[first_answer]}"
        )
        assert s.log.keys(MODEL_CALL_KIND) == ["0/0", "0/1", "1/0"]
        types = [m.framework_item["type"] for m in second.messages]
        assert types == ["human", "ai", "tool", "ai", "human", "ai"]
        # Stored items are plain JSON LangChain message dicts.
        assert json.loads(json.dumps(second.messages[2].framework_item)) == (
            second.messages[2].framework_item
        )
