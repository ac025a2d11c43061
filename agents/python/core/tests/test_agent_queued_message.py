from __future__ import annotations

from dex_agents.testing import FileGate, wait_for_agent_snapshot

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_a_message_sent_during_a_turn_starts_the_next_turn(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("gated") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("queue-1", "look up order 7")
        gate = FileGate(s.state_dir, "lookup_order")
        await gate.wait_until_reached()

        assert await s.sessions.send_user_message("queue-1", "thanks, bye")
        await wait_for_agent_snapshot(
            s.sessions,
            "queue-1",
            lambda snapshot: snapshot.queued_message_count == 1,
            description="one queued message",
        )
        snapshot = await s.sessions.get_agent_snapshot("queue-1")
        assert snapshot.state is not None and snapshot.state.turn_count == 1
        gate.release()

        snapshot = await wait_idle(s.sessions, "queue-1", turns=2)
        texts = assistant_texts(snapshot)
        assert texts[-1] == "echo: thanks, bye"
        assert texts[-2].startswith("lookup_order#call-0-0: succeeded")
        assert [m.turn_id for m in snapshot.messages if m.text == "thanks, bye"] == ["turn-2"]
