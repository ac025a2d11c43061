from __future__ import annotations

import json

from dex_agents import AgentSnapshot, ToolCallStatus, ToolEffect
from dex_agents.testing import wait_for_agent_snapshot

from tests.agent_defs import tool_kind
from tests.conftest import Scenario, ScenarioFactory


async def wait_for_refund_approval(s: Scenario, session_id: str) -> str:
    def pending(snapshot: AgentSnapshot) -> str | None:
        if not snapshot.pending_interrupts:
            return None
        # The other two calls (no approval needed) finish while the refund waits.
        finished = [c for c in snapshot.tool_calls if c.status.is_final]
        if len(finished) < 2:
            return None
        refund = [c for c in snapshot.tool_calls if c.tool_name == "issue_refund"]
        assert refund[0].status is ToolCallStatus.AWAITING_APPROVAL
        # requires_approval=True on the Pydantic AI tool, no explicit policy.
        assert refund[0].effect is ToolEffect.UNCLASSIFIED and refund[0].requires_approval
        return snapshot.pending_interrupts[0].interrupt_id

    return await wait_for_agent_snapshot(
        s.sessions, session_id, pending, description="the refund approval"
    )


async def test_approved_refund_runs_once_after_a_worker_restart(scenario: ScenarioFactory) -> None:
    async with scenario("approval") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("a1", "My order 1042 arrived broken, refund it")
        interrupt_id = await wait_for_refund_approval(s, "a1")
        assert s.log.count(tool_kind("issue_refund")) == 0
        worker.kill()
        await s.stack.start_worker()
        assert await s.sessions.resolve_interrupt("a1", interrupt_id, approved=True)
        snapshot = await s.wait_for_answers("a1", 1)
        assert s.log.count(tool_kind("issue_refund")) == 1
        assert "issue_refund[success]=refund of $249 issued" in snapshot.messages[-1].text


async def test_rejection_reaches_the_model_as_a_denial(scenario: ScenarioFactory) -> None:
    async with scenario("approval") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("r1", "My order 1042 arrived broken, refund it")
        interrupt_id = await wait_for_refund_approval(s, "r1")
        assert await s.sessions.resolve_interrupt(
            "r1", interrupt_id, approved=False, rejection_message="customer changed their mind"
        )
        snapshot = await s.wait_for_answers("r1", 1)
        assert s.log.count(tool_kind("issue_refund")) == 0
        # ToolDenied: Pydantic AI's native denial, with exactly the rejection message.
        assert "issue_refund[denied]=customer changed their mind" in snapshot.messages[-1].text


async def test_outcome_unknown_is_rendered_to_the_model(scenario: ScenarioFactory) -> None:
    async with scenario("approval") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("u1", "My order 1042 arrived broken, crash the refund")
        interrupt_id = await wait_for_refund_approval(s, "u1")
        assert await s.sessions.resolve_interrupt("u1", interrupt_id, approved=True)
        snapshot = await s.wait_for_answers("u1", 1)
        # The tool raised a non-ToolExecutionError: single attempt, outcome unknown.
        assert s.log.count(tool_kind("issue_refund")) == 1
        final = snapshot.messages[-1].text
        assert "issue_refund[failed]=The outcome of this tool call is unknown" in final
        assert "payment service closed the connection" in final


async def test_edited_arguments_run_and_the_model_sees_the_call_as_it_ran(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("approval") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("e1", "My order 1042 arrived broken, refund it")
        interrupt_id = await wait_for_refund_approval(s, "e1")
        edited = json.dumps({"order_id": 1042, "amount": 100})
        assert await s.sessions.resolve_interrupt(
            "e1", interrupt_id, approved=True, arguments=edited, approver="lee"
        )
        snapshot = await s.wait_for_answers("e1", 1)
        assert "refund of $100 issued for order 1042" in snapshot.messages[-1].text
        # The stored model response (what the model reads next) carries the edited call.
        calls = [
            part
            for m in snapshot.messages
            if isinstance(m.framework_item, dict) and m.framework_item.get("kind") == "response"
            for part in m.framework_item["parts"]
            if part.get("part_kind") == "tool-call" and part["tool_name"] == "issue_refund"
        ]
        assert len(calls) == 1
        args = calls[0]["args"]
        assert (json.loads(args) if isinstance(args, str) else args)["amount"] == 100
