from __future__ import annotations

import json

from dex_agents import AgentInterrupt, AgentSnapshot, MessageRole, ToolCallStatus
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, wait_for_agent_snapshot

from tests.agent_defs import tool_kind
from tests.conftest import Scenario, ScenarioFactory, final_answer, wait_idle


async def pending_refund(s: Scenario, session_id: str) -> AgentInterrupt:
    await s.sessions.start_session(session_id, "please refund")

    def probe(snapshot: AgentSnapshot) -> AgentInterrupt | None:
        return next(iter(snapshot.pending_interrupts), None)

    return await wait_for_agent_snapshot(s.sessions, session_id, probe, description="approval")


async def test_an_approved_refund_runs_once(scenario: ScenarioFactory) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "approve-1")
        assert interrupt.tool_name == "issue_refund"
        snapshot = await s.sessions.get_agent_snapshot("approve-1")
        assert [c.status for c in snapshot.tool_calls] == [ToolCallStatus.AWAITING_APPROVAL]
        assert s.log.count(tool_kind("issue_refund")) == 0

        assert await s.sessions.resolve_interrupt("approve-1", interrupt.interrupt_id, True)
        snapshot = await wait_idle(s.sessions, "approve-1", turns=1)
        assert final_answer(snapshot) == "issue_refund: refunded 30 on order 7"
        assert s.log.count(tool_kind("issue_refund")) == 1
        history = await s.stack.read_step_history("approve-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("CallSingleAttemptTool") == 1


async def test_a_rejection_reaches_the_model_through_the_native_path(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "reject-1")
        assert await s.sessions.resolve_interrupt(
            "reject-1", interrupt.interrupt_id, approved=False, rejection_message="too large"
        )
        snapshot = await wait_idle(s.sessions, "reject-1", turns=1)
        assert s.log.count(tool_kind("issue_refund")) == 0
        expected = "The user rejected this tool call: too large"
        assert final_answer(snapshot) == f"issue_refund: {expected}"
        # The SDK's reject() wrote the function_call_output the model saw.
        outputs = [m.framework_item for m in snapshot.messages if m.role is MessageRole.TOOL]
        assert outputs == [
            {"call_id": "call_1_0_0", "output": expected, "type": "function_call_output"}
        ]


async def test_outcome_unknown_is_rendered_to_the_model(scenario: ScenarioFactory) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        # The idempotent write raises on every attempt: three attempts, then outcome_unknown.
        await s.sessions.start_session("unknown-1", "add a note: explode")
        snapshot = await wait_idle(s.sessions, "unknown-1", turns=1, timeout=60)
        assert s.log.count(tool_kind("add_note")) == 3
        answer = final_answer(snapshot)
        assert answer.startswith(
            "add_note: The outcome of this tool call is unknown: it may or may not have "
            "taken effect"
        )
        assert "Check before trying it again." in answer


async def test_edited_arguments_run_and_the_output_names_them(scenario: ScenarioFactory) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "edit-1")
        edited = json.dumps({"order_id": 7, "amount": 9})
        assert await s.sessions.resolve_interrupt(
            "edit-1", interrupt.interrupt_id, True, arguments=edited, approver="sam"
        )
        snapshot = await wait_idle(s.sessions, "edit-1", turns=1)
        assert s.log.count(tool_kind("issue_refund")) == 1
        # The function_call_output the model reads says which arguments the call ran with.
        [output] = [m.framework_item for m in snapshot.messages if m.role is MessageRole.TOOL]
        assert output["output"] == (
            f"[The approver changed the arguments; the call ran with {edited}] "
            "refunded 9 on order 7"
        )
