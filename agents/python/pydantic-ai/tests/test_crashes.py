from __future__ import annotations

import json

from dex_agents import MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, FileGate

from tests.agent_defs import MODEL_KIND, tool_kind
from tests.conftest import ScenarioFactory

TOOLS = ("lookup_order", "add_note", "issue_refund")


async def test_worker_killed_during_the_model_call(scenario: ScenarioFactory) -> None:
    async with scenario("crash_model") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("m1", "My order 1042 arrived broken, refund it")
        gate = FileGate(s.state_dir, "model-turn-1-call-0")
        await gate.wait_until_reached()
        worker.kill()
        gate.release()
        await s.stack.start_worker()
        snapshot = await s.wait_for_answers("m1", 1)

        # Only the interrupted model call repeated; no tool ran inside RunModel.
        assert s.log.keys(MODEL_KIND) == ["turn-1/call-0", "turn-1/call-0", "turn-1/call-1"]
        for name in TOOLS:
            assert s.log.count(tool_kind(name)) == 1, name
        assert "issue_refund[success]" in snapshot.messages[-1].text
        history = await s.stack.read_step_history("m1")
        run_model = [e for e in history if e.step_type == "RunModel"]
        assert [e.event_type for e in run_model].count(EXECUTE_COMPLETED_EVENT) == 2


async def test_worker_killed_in_every_tool_step(scenario: ScenarioFactory) -> None:
    async with scenario("crash_tools") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("c1", "My order 1042 arrived broken, refund it")
        gates = [FileGate(s.state_dir, f"tool-{name}") for name in TOOLS]
        # All three gates held at once: the three tool Steps run in parallel.
        for gate in gates:
            await gate.wait_until_reached()
        worker.kill()
        for gate in gates:
            gate.release()
        await s.stack.start_worker()
        snapshot = await s.wait_for_answers("c1", 1)

        # read and idempotent write ran again (same key); the single-attempt write did not.
        assert s.log.count(tool_kind("lookup_order")) == 2
        keys = s.log.keys(tool_kind("add_note"))
        assert len(keys) == 2 and keys[0] == keys[1]
        notes = json.loads((s.state_dir / "ticket-notes.json").read_text())
        assert list(notes) == [keys[0]]
        assert s.log.count(tool_kind("issue_refund")) == 1
        assert s.log.keys(MODEL_KIND) == ["turn-1/call-0", "turn-1/call-1"]

        # The model saw outcome_unknown for the refund, on Pydantic AI's failure channel.
        final = snapshot.messages[-1]
        assert final.role is MessageRole.ASSISTANT
        assert "lookup_order[success]" in final.text
        assert "add_note[success]" in final.text
        assert "issue_refund[failed]=The outcome of this tool call is unknown" in final.text
