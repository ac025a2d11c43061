from __future__ import annotations

from dex_agents import AgentInterrupt, AgentSnapshot, ToolCallStatus, ToolEffect
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
