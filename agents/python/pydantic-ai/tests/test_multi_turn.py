from __future__ import annotations

from dex_agents import MessageRole

from tests.agent_defs import MODEL_KIND
from tests.conftest import ScenarioFactory


async def test_second_turn_sees_the_first_after_a_worker_restart(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("multi_turn") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("t1", "My order 1042 arrived broken, refund it")
        first = await s.wait_for_answers("t1", 1)
        assert len(first.messages) == 4

        # A fresh process rebuilds the history from the stored framework items only.
        worker.kill()
        await s.stack.start_worker()
        assert await s.sessions.send_user_message("t1", "Do you remember my order?")
        snapshot = await s.wait_for_answers("t1", 2)

        assert [m.role for m in snapshot.messages[4:]] == [MessageRole.USER, MessageRole.ASSISTANT]
        answer = snapshot.messages[-1].text
        assert answer == "Earlier you asked about the espresso machine: True (5 messages)."
        assert snapshot.messages[:4] == first.messages
        assert s.log.keys(MODEL_KIND) == ["turn-1/call-0", "turn-1/call-1", "turn-2/call-0"]
