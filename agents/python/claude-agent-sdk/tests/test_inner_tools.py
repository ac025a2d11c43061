"""Tools the agent serves itself (an SDK MCP server in its options) run inside RunModel."""

from __future__ import annotations

from dex_agents.testing import EXECUTE_COMPLETED_EVENT, FileGate

from tests.agent_defs import INNER_KIND, MODEL_KIND
from tests.conftest import Scenario, ScenarioFactory


def inner_runs(s: Scenario) -> list[str | None]:
    return [e.detail for e in s.log.entries() if e.kind == INNER_KIND]


async def test_an_inner_tool_runs_in_the_model_step(scenario: ScenarioFactory) -> None:
    async with scenario("inner") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("i1", "When are you open?")
        snapshot = await s.wait_for_answers("i1", 1)

        assert snapshot.messages[-1].text == "Hours: open 9 to 17"
        # Not deferred: no tool Step, no tool record; the CLI called the model again
        # within the same RunModel Step.
        assert inner_runs(s) == ["tool_step=False"]
        assert s.log.keys(MODEL_KIND) == ["turn-1/call-0", "turn-1/call-1"]
        assert snapshot.usage.requests == 2
        history = await s.stack.read_step_history("i1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("RunModel") == 1
        assert not any("Tool" in step for step in executed)


async def test_an_inner_tool_runs_again_when_its_model_step_retries(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("crash_inner") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("i2", "When are you open?")
        gate = FileGate(s.state_dir, "model-turn-1-call-1")
        await gate.wait_until_reached(timeout=60)
        # Killed after the inner tool ran, during the model call that follows it.
        assert len(inner_runs(s)) == 1
        worker.kill()
        gate.release()
        await s.stack.start_worker()
        snapshot = await s.wait_for_answers("i2", 1)

        # At-least-once, as documented: the retried Step ran the whole CLI loop again.
        assert len(inner_runs(s)) == 2
        assert s.log.keys(MODEL_KIND) == [
            "turn-1/call-0",
            "turn-1/call-1",
            "turn-1/call-0",
            "turn-1/call-1",
        ]
        assert snapshot.messages[-1].text == "Hours: open 9 to 17"
