from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path

from claude_agent_sdk import ClaudeSDKClient, ResultMessage, create_sdk_mcp_server
from dex_agents import AgentEvent, AgentEventType, AgentSessionClient, MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT

from dex_agents_claude_agent_sdk import ONE_CALL_AT_A_TIME
from tests.agent_defs import (
    MODEL_KIND,
    SERVER,
    TOOLS,
    SupportDesk,
    agent_options,
    cli_name,
    tool_kind,
)
from tests.conftest import ScenarioFactory


async def collect_events(
    sessions: AgentSessionClient, session_id: str, until: AgentEventType
) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    async for event in sessions.follow_events(session_id):
        events.append(event)
        if event.type is until:
            return events
    return events


async def test_each_model_call_and_tool_call_is_its_own_step(scenario: ScenarioFactory) -> None:
    async with scenario("sequential") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("s1", "My order 1042 arrived broken, refund it")
        events = await asyncio.wait_for(
            collect_events(s.sessions, "s1", AgentEventType.TURN_COMPLETED), 90
        )
        snapshot = await s.wait_for_answers("s1", 1)

        # Policies came from the tools' MCP annotations and the session's options.
        deferred = {
            e.data["tool_name"]: e.data["effect"]
            for e in events
            if e.type is AgentEventType.TOOL_CALL_DEFERRED
        }
        assert deferred == {
            "lookup_order": "read",
            "add_note": "idempotent_write",
            "issue_refund": "non_idempotent_write",
        }
        text = "".join(str(e.data["text"]) for e in events if e.type is AgentEventType.TEXT_DELTA)
        assert text.startswith("Let me handle that.") and "Done. Results:" in text

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

        # The first call of each response is deferred; the others are answered with the
        # refusal, never run, and the model asks for them again.
        for name in TOOLS:
            assert s.log.count(tool_kind(name)) == 1, name
        second = s.model.calls[1]
        refused = [r for r in second.tool_results if ONE_CALL_AT_A_TIME in r.text]
        assert [r.tool_name for r in refused] == [cli_name("add_note"), cli_name("issue_refund")]
        # The later response asking for two again resumes without the CLI's repairs.
        assert not any(
            c.saw_text(CLI_REPAIRS[0]) or c.saw_text(CLI_REPAIRS[1]) for c in s.model.calls
        )
        assert "issue_refund[ok]=refund of $249 issued" in snapshot.messages[-1].text
        # Each model call had its own RunModel Step.
        history = await s.stack.read_step_history("p1")
        run_model = [e for e in history if e.step_type == "RunModel"]
        completed = [e.event_type for e in run_model].count(EXECUTE_COMPLETED_EVENT)
        assert completed == len(s.model.calls) == s.log.count(MODEL_KIND)


async def test_durable_run_matches_the_sdk_run_alone(
    scenario: ScenarioFactory, tmp_path: Path
) -> None:
    async with scenario("sequential") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("c1", "My order 1042 arrived broken, refund it")
        durable = (await s.wait_for_answers("c1", 1)).messages[-1].text

        # The same agent with the SDK alone: its CLI runs the tools itself.
        desk = SupportDesk("sequential", s.state_dir)
        options = dataclasses.replace(
            agent_options("sequential", s.state_dir),
            mcp_servers={SERVER: create_sdk_mcp_server(SERVER, tools=desk.tools())},
            allowed_tools=[cli_name(name) for name in TOOLS],
            env=s.model.cli_env(home=tmp_path / "control-home"),
        )
        alone = ""
        async with ClaudeSDKClient(options) as client:
            await client.query("My order 1042 arrived broken, refund it")
            async for message in client.receive_response():
                if isinstance(message, ResultMessage):
                    alone = message.result or ""
        assert alone == durable
        assert alone.startswith("Done. Results: lookup_order[ok]=")
        for name in TOOLS:
            assert s.log.count(f"direct:{name}") == 1, name


# What the CLI writes into a conversation it resumes after a cut-short turn.
CLI_REPAIRS = ("Tool result missing due to internal error", "No response requested.")


async def test_a_later_response_with_several_calls_resumes_cleanly(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("parallel_later") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("l1", "My order 1042 arrived broken, refund it")
        snapshot = await s.wait_for_answers("l1", 1)

        # The second response asked for add_note and issue_refund: add_note was deferred,
        # issue_refund refused. Resuming, the model saw add_note's real result and nothing
        # the CLI makes up for a turn it thinks was cut short.
        for name in TOOLS:
            assert s.log.count(tool_kind(name)) == 1, name
        for call in s.model.calls:
            for repair in CLI_REPAIRS:
                assert not call.saw_text(repair), (call.call_index, repair)
        third = s.model.calls[2]
        assert [(r.tool_name, r.is_error) for r in third.tool_results[1:]] == [
            (cli_name("issue_refund"), True),
            (cli_name("add_note"), False),
        ]
        assert third.tool_results[2].text == "note stored on order 1042"
        assert len(s.model.calls) == 4
        texts = [m.text for m in snapshot.messages]
        assert not any(repair in text for text in texts for repair in CLI_REPAIRS)
        assert "issue_refund[ok]=refund of $249 issued" in texts[-1]
