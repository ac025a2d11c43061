from __future__ import annotations

import json

from dex_agents import MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT

from dex_agents_claude_agent_sdk import ONE_CALL_AT_A_TIME
from tests.agent_defs import MODEL_KIND, TOOLS, cli_name, tool_kind
from tests.conftest import ScenarioFactory


async def test_each_model_call_and_tool_call_is_its_own_step(scenario: ScenarioFactory) -> None:
    async with scenario("sequential") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("s1", "My order 1042 arrived broken, refund it")
        snapshot = await s.wait_for_answers("s1", 1)

        for name in TOOLS:
            assert s.log.count(tool_kind(name)) == 1, name
        assert s.log.keys(MODEL_KIND) == [f"turn-1/call-{n}" for n in range(4)]
        history = await s.stack.read_step_history("s1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("RunModel") + executed.count("ResumeTurn") >= 4
        assert executed.count("CallTool") == 2
        assert executed.count("CallSingleAttemptTool") == 1

        final = snapshot.messages[-1]
        assert final.role is MessageRole.ASSISTANT
        assert "lookup_order[ok]=" in final.text and "espresso machine" in final.text
        assert "add_note[ok]=note stored on order 1042" in final.text
        assert "issue_refund[ok]=refund of $249 issued for order 1042" in final.text
        roles = [m.role for m in snapshot.messages]
        assert roles[0] is MessageRole.USER and MessageRole.TOOL in roles
        notes = json.loads((s.state_dir / "ticket-notes.json").read_text())
        assert list(notes) == s.log.keys(tool_kind("add_note"))
        usage = (await s.sessions.get_agent_snapshot("s1")).usage
        assert usage.requests == 4 and usage.output_tokens > 0


async def test_second_turn_sees_the_first_on_a_new_worker(scenario: ScenarioFactory) -> None:
    async with scenario("sequential") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("t1", "My order 1042 arrived broken, refund it")
        await s.wait_for_answers("t1", 1)
        worker.kill()
        await s.stack.start_worker()
        await s.sessions.send_user_message("t1", "Do you remember what I asked?")
        snapshot = await s.wait_for_answers("t1", 2)
        assert snapshot.messages[-1].text == "Earlier you asked about the espresso machine: True."
        assert s.log.count(tool_kind("issue_refund")) == 1


async def test_parallel_custom_calls_run_one_after_another(scenario: ScenarioFactory) -> None:
    async with scenario("parallel") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("p1", "My order 1042 arrived broken, refund it")
        snapshot = await s.wait_for_answers("p1", 1)

        # The first call of each response is deferred; the CLI refuses the rest, and the
        # model asks for them again: three tool Steps, four model calls, no repeats.
        for name in TOOLS:
            assert s.log.count(tool_kind(name)) == 1, name
        assert s.log.keys(MODEL_KIND) == [f"turn-1/call-{n}" for n in range(4)]
        first = s.model.calls[1]
        refused = [r for r in first.tool_results if ONE_CALL_AT_A_TIME in r.text]
        assert [r.tool_name for r in refused] == [cli_name("add_note"), cli_name("issue_refund")]
        assert "issue_refund[ok]=refund of $249 issued" in snapshot.messages[-1].text
