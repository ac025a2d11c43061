from __future__ import annotations

from dex_agents.testing import EXECUTE_COMPLETED_EVENT, MODEL_CALL_KIND, FileGate, tool_call_kind

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_a_crash_during_run_model_repeats_only_that_model_call(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("model_crash") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("model-crash-1", "where is order 7?")

        gate = FileGate(s.state_dir, "model-1")
        await gate.wait_until_reached()
        worker.kill()  # SIGKILL inside the second model call of the turn
        gate.release()
        await s.stack.start_worker()

        snapshot = await wait_idle(s.sessions, "model-crash-1", turns=1)
        assert assistant_texts(snapshot)[-1] == "order 7 shipped"
        assert snapshot.state is not None and snapshot.state.last_turn_error is None

        # The model call ran twice; the finished read and the first model call did not.
        assert s.log.count(MODEL_CALL_KIND, "model-crash-1/turn-1/1") == 2
        assert s.log.count(MODEL_CALL_KIND, "model-crash-1/turn-1/0") == 1
        assert s.log.count(tool_call_kind("lookup_order")) == 1

        history = await s.stack.read_step_history("model-crash-1")
        executed = [e for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert [e.step_type for e in executed].count("CallTool") == 1
        assert [e.step_type for e in executed].count("RunModel") == 2
