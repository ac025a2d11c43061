from __future__ import annotations

import asyncio
import json
from pathlib import Path

from dex_agents import AgentEvent, AgentEventType, AgentSessionClient, MessageRole
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, AgentTestStack, wait_for_agent_snapshot

from dex_agents_pydantic_ai._items import dump_message, load_messages
from tests.agent_defs import MODEL_KIND, tool_kind
from tests.conftest import ScenarioFactory
from tests.test_model_agent import build_flow as build_test_model_flow


async def collect_events(
    sessions: AgentSessionClient, session_id: str, until: AgentEventType
) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    async for event in sessions.follow_events(session_id):
        events.append(event)
        if event.type is until:
            return events
    return events


async def test_parallel_tool_calls_of_each_effect_run_once(scenario: ScenarioFactory) -> None:
    async with scenario("parallel") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("s1", "My order 1042 arrived broken, refund it")
        events = await asyncio.wait_for(
            collect_events(s.sessions, "s1", AgentEventType.TURN_COMPLETED), 30
        )
        snapshot = await s.wait_for_answers("s1", 1)

        # Each framework tool function ran exactly once; two model calls in two Steps.
        for name in ("lookup_order", "add_note", "issue_refund"):
            assert s.log.count(tool_kind(name)) == 1, name
        assert s.log.keys(MODEL_KIND) == ["turn-1/call-0", "turn-1/call-1"]
        history = await s.stack.read_step_history("s1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("RunModel") == 2
        assert executed.count("CallTool") == 2
        assert executed.count("CallSingleAttemptTool") == 1

        # Policies came from the tools' own metadata (annotations, dex_effect) and options.
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

        # Text and reasoning streamed as deltas.
        text = "".join(str(e.data["text"]) for e in events if e.type is AgentEventType.TEXT_DELTA)
        assert text.startswith("Let me handle that.")
        assert "Results:" in text
        reasoning = [e for e in events if e.type is AgentEventType.REASONING_DELTA]
        assert reasoning and "in parallel" in str(reasoning[0].data["text"])

        # The turn stored every item: user, tool requests, tool returns, final answer.
        roles = [m.role for m in snapshot.messages]
        assert roles == [
            MessageRole.USER,
            MessageRole.ASSISTANT,
            MessageRole.TOOL,
            MessageRole.ASSISTANT,
        ]
        final = snapshot.messages[-1].text
        assert "lookup_order[success]=" in final and "espresso machine" in final
        assert "add_note[success]=note stored on order 1042" in final
        assert "issue_refund[success]=refund of $249 issued for order 1042" in final
        items = [m.framework_item for m in snapshot.messages]
        assert [dump_message(m) for m in load_messages(items)] == items
        usage = (await s.sessions.get_agent_snapshot("s1")).usage
        assert usage.requests == 2 and usage.output_tokens > 0

        # The idempotent write stored one note under the call's idempotency key.
        notes = json.loads((s.state_dir / "ticket-notes.json").read_text())
        assert list(notes) == s.log.keys(tool_kind("add_note"))
        assert next(iter(notes)).startswith("s1/turn-1/")


async def test_framework_test_model_runs_a_turn(tmp_path: Path) -> None:
    flow = build_test_model_flow()
    package_dir = Path(__file__).resolve().parents[1]
    env = {"TEST_MODEL_LOG": str(tmp_path / "calls.log")}
    async with AgentTestStack(
        tmp_path, [flow], "tests.test_model_agent", worker_cwd=package_dir, worker_env=env
    ) as stack:
        sessions = stack.sessions(flow)
        await stack.start_worker()
        await sessions.start_session("t1", "what is the weather?")
        snapshot = await wait_for_agent_snapshot(
            sessions,
            "t1",
            lambda snap: snap if len(snap.messages) == 4 else None,
            description="the TestModel turn",
        )
        assert snapshot.messages[-1].role is MessageRole.ASSISTANT
        assert snapshot.messages[2].text.startswith("[success] get_weather: sunny in")
        assert (tmp_path / "calls.log").read_text().count("get_weather") == 1
