from __future__ import annotations

import asyncio

import pytest
from dex_agents import AgentEventType, AgentInterrupt, AgentSnapshot, ToolCallStatus
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, tool_call_kind, wait_for_agent_snapshot

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import Scenario, ScenarioFactory


async def pending_refund(s: Scenario, session_id: str) -> AgentInterrupt:
    await s.sessions.start_session(session_id, "refund order 7")

    def first_interrupt(snapshot: AgentSnapshot) -> AgentInterrupt | None:
        return next(iter(snapshot.pending_interrupts), None)

    return await wait_for_agent_snapshot(
        s.sessions, session_id, first_interrupt, description="a pending approval"
    )


async def test_an_approval_survives_a_worker_kill(scenario: ScenarioFactory) -> None:
    async with scenario("router") as s:
        worker = await s.stack.start_worker()
        interrupt = await pending_refund(s, "approve-1")
        assert interrupt.tool_name == "issue_refund"
        assert interrupt.deadline is None
        snapshot = await s.sessions.get_agent_snapshot("approve-1")
        assert [c.status for c in snapshot.tool_calls] == [ToolCallStatus.AWAITING_APPROVAL]

        worker.kill()  # the session waits without a Worker
        await s.stack.start_worker()
        assert await s.sessions.resolve_interrupt(
            "approve-1", interrupt.interrupt_id, approved=True
        )
        # A second answer to the same interrupt is refused.
        assert not await s.sessions.resolve_interrupt(
            "approve-1", interrupt.interrupt_id, approved=False
        )

        snapshot = await wait_idle(s.sessions, "approve-1", turns=1)
        assert assistant_texts(snapshot)[-1] == (
            "issue_refund#call-0-0: succeeded: refunded 30 on order 7"
        )
        assert snapshot.pending_interrupts == []
        assert s.log.count(tool_call_kind("issue_refund")) == 1

        history = await s.stack.read_step_history("approve-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("AwaitToolApproval") == 1
        assert executed.count("CallSingleAttemptTool") == 1


async def test_the_model_sees_a_rejection(scenario: ScenarioFactory) -> None:
    async with scenario("router") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "reject-1")
        assert await s.sessions.resolve_interrupt(
            "reject-1", interrupt.interrupt_id, approved=False, rejection_message="too large"
        )
        snapshot = await wait_idle(s.sessions, "reject-1", turns=1)
        answer = assistant_texts(snapshot)[-1]
        assert answer.startswith("issue_refund#call-0-0: rejected: ")
        assert "too large" in answer
        assert s.log.count(tool_call_kind("issue_refund")) == 0


async def test_an_approval_deadline_expires_as_a_rejection(scenario: ScenarioFactory) -> None:
    async with scenario("deadline") as s:
        await s.stack.start_worker()
        interrupt = await pending_refund(s, "deadline-1")
        assert interrupt.deadline is not None
        assert interrupt.deadline - interrupt.created_at == pytest.approx(1.0)

        snapshot = await wait_idle(s.sessions, "deadline-1", turns=1, timeout=20)
        assert snapshot.pending_interrupts == []
        assert assistant_texts(snapshot)[-1].startswith("issue_refund#call-0-0: rejected: ")
        assert s.log.count(tool_call_kind("issue_refund")) == 0
        # Too late: the interrupt is gone.
        assert not await s.sessions.resolve_interrupt(
            "deadline-1", interrupt.interrupt_id, approved=True
        )


async def test_an_event_announcing_state_finds_it_committed(scenario: ScenarioFactory) -> None:
    """A client acting on events alone, as the seeds' UI does, never reads ahead of them."""
    async with scenario("router") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("announce-1", "refund order 7")
        seen: list[AgentEventType] = []

        async def follow() -> None:
            async for event in s.sessions.follow_events("announce-1"):
                seen.append(event.type)
                if event.type is AgentEventType.TOOL_CALL_DEFERRED:
                    snapshot = await s.sessions.get_agent_snapshot("announce-1")
                    ids = [c.tool_call_id for c in snapshot.tool_calls]
                    assert event.data["tool_call_id"] in ids
                elif event.type is AgentEventType.INTERRUPT_RAISED:
                    # answered straight from the event: the approval is pending already
                    assert await s.sessions.resolve_interrupt(
                        "announce-1", event.data["interrupt_id"], approved=True
                    )
                elif event.type is AgentEventType.TURN_COMPLETED:
                    snapshot = await s.sessions.get_agent_snapshot("announce-1")
                    assert len(snapshot.messages) == event.data["message_count"]
                    assert snapshot.pending_interrupts == []
                    return

        await asyncio.wait_for(follow(), timeout=60)
        assert AgentEventType.INTERRUPT_RAISED in seen
        assert s.log.count(tool_call_kind("issue_refund")) == 1
