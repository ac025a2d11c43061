from __future__ import annotations

from dex_agents import MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, MODEL_CALL_KIND, tool_call_kind

from tests.agent_defs import FAILURE_NOTE_PREFIX
from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_a_failed_turn_leaves_a_note_of_the_tool_calls_that_ran(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("failing_turn") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("fail-1", "where is order 7?")
        snapshot = await wait_idle(s.sessions, "fail-1", turns=1, timeout=60)

        assert snapshot.state is not None
        assert snapshot.state.last_turn_error
        assert "model down" in snapshot.state.last_turn_error
        # The Worker's log shows each failed model call with its traceback, and the turn.
        worker_log = worker.log_tail(200_000)
        assert "Step RunModel.execute of Flow" in worker_log
        assert "Traceback (most recent call last)" in worker_log
        assert "turn turn-1 failed:" in worker_log and "model down" in worker_log
        assert snapshot.tool_calls == []  # the turn's records are cleared
        notes = [m for m in snapshot.messages if m.text.startswith(FAILURE_NOTE_PREFIX)]
        assert len(notes) == 1
        note = notes[0]
        assert note.role is MessageRole.USER
        assert '- lookup_order {"order_id": 7} -> succeeded: ' in note.text
        assert note.text.endswith("Do not repeat these tool calls unless the user asks again.")
        # Three RunModel attempts for the failing call, one read.
        assert s.log.count(MODEL_CALL_KIND, "fail-1/turn-1/1") == 3
        assert s.log.count(tool_call_kind("lookup_order")) == 1

        history = await s.stack.read_step_history("fail-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("RecordTurnFailure") == 1

        # The next turn's model sees the note, and a completed turn clears the error.
        assert await s.sessions.send_user_message("fail-1", "try again")
        snapshot = await wait_idle(s.sessions, "fail-1", turns=2)
        assert assistant_texts(snapshot)[-1] == "saw 1 failure note(s)"
        assert snapshot.state is not None and snapshot.state.last_turn_error is None
