from __future__ import annotations

import json

from dex_agents.testing import EXECUTE_COMPLETED_EVENT, FileGate

from tests.agent_defs import MODEL_KIND, TOOLS, tool_kind
from tests.conftest import ScenarioFactory

REQUEST = "My order 1042 arrived broken, refund it"


async def test_worker_killed_during_a_model_call(scenario: ScenarioFactory) -> None:
    async with scenario("crash_model") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("m1", REQUEST)
        gate = FileGate(s.state_dir, "model-turn-1-call-1")
        await gate.wait_until_reached(timeout=60)
        worker.kill()
        gate.release()
        await s.stack.start_worker()
        snapshot = await s.wait_for_answers("m1", 1)

        # Only the interrupted model call repeated; every tool ran once, in its own Step.
        keys = s.log.keys(MODEL_KIND)
        assert keys == [
            "turn-1/call-0",
            "turn-1/call-1",
            "turn-1/call-1",
            "turn-1/call-2",
            "turn-1/call-3",
        ]
        for name in TOOLS:
            assert s.log.count(tool_kind(name)) == 1, name
        assert "issue_refund[ok]=refund of $249" in snapshot.messages[-1].text
        history = await s.stack.read_step_history("m1")
        run_model = [e for e in history if e.step_type == "RunModel"]
        assert [e.event_type for e in run_model].count(EXECUTE_COMPLETED_EVENT) == 4


async def test_worker_killed_in_an_idempotent_write(scenario: ScenarioFactory) -> None:
    async with scenario("crash_note") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("n1", REQUEST)
        gate = FileGate(s.state_dir, "tool-add_note")
        await gate.wait_until_reached(timeout=60)
        worker.kill()
        gate.release()
        await s.stack.start_worker()
        snapshot = await s.wait_for_answers("n1", 1)

        # The idempotent write ran again with the same key and stored one note.
        keys = s.log.keys(tool_kind("add_note"))
        assert len(keys) == 2 and keys[0] == keys[1]
        notes = json.loads((s.state_dir / "ticket-notes.json").read_text())
        assert list(notes) == [keys[0]]
        assert s.log.count(tool_kind("issue_refund")) == 1
        assert "add_note[ok]=note stored on order 1042" in snapshot.messages[-1].text


async def test_worker_killed_in_a_non_idempotent_write(scenario: ScenarioFactory) -> None:
    async with scenario("crash_refund") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("r1", REQUEST)
        gate = FileGate(s.state_dir, "tool-issue_refund")
        await gate.wait_until_reached(timeout=60)
        worker.kill()
        gate.release()
        await s.stack.start_worker()
        snapshot = await s.wait_for_answers("r1", 1)

        # The single-attempt write never ran again: the model hears "outcome unknown".
        assert s.log.count(tool_kind("issue_refund")) == 1
        final = snapshot.messages[-1].text
        assert "issue_refund[error]=The outcome of this tool call is unknown" in final
