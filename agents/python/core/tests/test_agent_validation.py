from __future__ import annotations

from dex_agents.testing import MODEL_CALL_KIND, tool_call_kind

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_blank_text_starts_no_turn(scenario: ScenarioFactory) -> None:
    async with scenario("router") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("blank-1", "   ")
        snapshot = await wait_idle(s.sessions, "blank-1", turns=0)
        assert snapshot.messages == []

        assert not await s.sessions.send_user_message("blank-1", "")
        assert not await s.sessions.send_user_message("blank-1", " \n\t ")
        snapshot = await s.sessions.get_agent_snapshot("blank-1")
        assert snapshot.queued_message_count == 0
        assert snapshot.state is not None and snapshot.state.turn_count == 0
        assert s.log.count(MODEL_CALL_KIND) == 0

        assert await s.sessions.send_user_message("blank-1", "real words")
        snapshot = await wait_idle(s.sessions, "blank-1", turns=1)
        assert assistant_texts(snapshot) == ["echo: real words"]


async def test_invalid_tool_call_ids_fail_the_turn(scenario: ScenarioFactory) -> None:
    async with scenario("bad_ids") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("ids-1")
        expected = {
            1: "empty ID",
            2: "contains '/'",
            3: "repeats in this turn",
            4: "repeats in this turn",
        }
        for turn, fragment in expected.items():
            assert await s.sessions.send_user_message("ids-1", f"turn {turn}")
            snapshot = await wait_idle(s.sessions, "ids-1", turns=turn, timeout=60)
            assert snapshot.state is not None
            error = snapshot.state.last_turn_error or ""
            assert fragment in error, (turn, error)
            assert snapshot.tool_calls == []

        # Only turn 4's first batch was valid, so only its one read ran.
        assert s.log.count(tool_call_kind("lookup_order")) == 1
        # The session is still usable, and a completed turn clears the error.
        assert await s.sessions.send_user_message("ids-1", "all good?")
        snapshot = await wait_idle(s.sessions, "ids-1", turns=5)
        assert assistant_texts(snapshot)[-1] == "fine: all good?"
        assert snapshot.state is not None and snapshot.state.last_turn_error is None
