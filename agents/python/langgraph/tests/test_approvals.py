from __future__ import annotations

import json

from dex_agents import AgentInterrupt, AgentSnapshot, MessageRole, ToolCallStatus, ToolEffect
from dex_agents.testing import tool_call_kind, wait_for_agent_snapshot

from tests.conftest import Scenario, ScenarioFactory
from tests.helpers import final_answer, wait_idle


async def pending_refund(s: Scenario, session_id: str) -> AgentInterrupt:
    await s.sessions.start_session(session_id, "refund order 7 please")

    def first_interrupt(snapshot: AgentSnapshot) -> AgentInterrupt | None:
        return next(iter(snapshot.pending_interrupts), None)

    return await wait_for_agent_snapshot(
        s.sessions, session_id, first_interrupt, description="a pending approval"
    )


async def test_an_approved_refund_runs_once(scenario: ScenarioFactory) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "approve-1")
        snapshot = await s.sessions.get_agent_snapshot("approve-1")
        [record] = snapshot.tool_calls
        # readOnlyHint=False in the tool's metadata: a non-idempotent write.
        assert record.effect is ToolEffect.NON_IDEMPOTENT_WRITE
        assert record.status is ToolCallStatus.AWAITING_APPROVAL
        assert s.log.count(tool_call_kind("issue_refund")) == 0

        assert await s.sessions.resolve_interrupt("approve-1", interrupt.interrupt_id, True)
        snapshot = await wait_idle(s.sessions, "approve-1", turns=1)
        assert final_answer(snapshot) == "issue_refund#call_0_0_0: success: refunded 30 on order 7"
        assert s.log.count(tool_call_kind("issue_refund")) == 1


async def test_the_model_sees_a_rejection_as_a_tool_error(scenario: ScenarioFactory) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "reject-1")
        assert await s.sessions.resolve_interrupt(
            "reject-1", interrupt.interrupt_id, approved=False, rejection_message="too large"
        )
        snapshot = await wait_idle(s.sessions, "reject-1", turns=1)
        assert final_answer(snapshot) == (
            "issue_refund#call_0_0_0: error: The user rejected this tool call: too large"
        )
        assert s.log.count(tool_call_kind("issue_refund")) == 0
        tool_item = next(m.framework_item for m in snapshot.messages if m.role == "tool")
        assert tool_item["data"]["status"] == "error"


async def test_edited_arguments_run_and_the_model_sees_the_edited_call(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("desk") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "edit-1")
        edited = json.dumps({"order_id": 7, "amount": 5})
        assert await s.sessions.resolve_interrupt(
            "edit-1", interrupt.interrupt_id, True, arguments=edited, approver="kim"
        )
        snapshot = await wait_idle(s.sessions, "edit-1", turns=1)
        assert "refunded 5 on order 7" in final_answer(snapshot)
        # The stored AI message (the model's history) asks for the arguments that ran.
        asked = [
            call["args"]
            for m in snapshot.messages
            if m.role is MessageRole.ASSISTANT
            for call in (m.framework_item.get("data", {}).get("tool_calls") or [])
            if call["name"] == "issue_refund"
        ]
        assert asked == [{"order_id": 7, "amount": 5}]
