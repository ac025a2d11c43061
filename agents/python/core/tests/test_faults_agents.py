"""Agent sessions under faults: approvals a turn stop leaves behind, snapshots without Workers.

A steered or cancelled turn must not leave its ``AwaitToolApproval`` executions waiting for
an answer that can no longer matter, and a person must see a session (its pending approval,
say) while the agent's Worker is down.
"""

from __future__ import annotations

import asyncio

from dex_agents import AgentSnapshot, ToolCallStatus
from dex_agents.testing import FileGate, wait_for_agent_snapshot, wait_until

from tests.agent_helpers import wait_idle
from tests.conftest import Scenario, ScenarioFactory

APPROVAL = "AwaitToolApproval"
# a read of committed state answers at once; a Worker-bound call would wait for a Worker
PROMPT_S = 10.0


def open_model_gates(s: Scenario, turns: int = 3) -> None:
    for t in range(1, turns + 1):
        for i in range(3):
            FileGate(s.state_dir, f"model-turn-{t}-{i}").release()


async def approval_executions(s: Scenario, session_id: str) -> list[str]:
    state = await s.stack.client.get_flow_state(session_id)
    return [a.step_execution_id for a in state.active_steps if a.step_type == APPROVAL]


async def waiting_approval(s: Scenario, session_id: str) -> str:
    """Start a turn that asks to approve a refund (no deadline); return the interrupt ID."""
    await s.sessions.start_session(session_id, "refund order 7")
    interrupt = await wait_for_agent_snapshot(
        s.sessions,
        session_id,
        lambda snapshot: next(iter(snapshot.pending_interrupts), None),
        description="a pending approval",
    )
    assert interrupt.deadline is None
    await wait_until(
        f"{APPROVAL} waiting in {session_id}", lambda: approval_executions(s, session_id)
    )
    return interrupt.interrupt_id


async def no_approval_left(s: Scenario, session_id: str) -> None:
    async def gone() -> bool:
        return not await approval_executions(s, session_id)

    await wait_until(f"no {APPROVAL} execution left in {session_id}", gone, timeout=20.0)


# --------------------------------------------------------------------------- turn stops


async def test_a_steer_cancels_the_approval_steps_of_the_turn(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        open_model_gates(s)
        await s.stack.start_worker()
        interrupt_id = await waiting_approval(s, "steer-waiting")
        assert await s.sessions.steer_user_message("steer-waiting", "skip it, thanks")

        snapshot = await wait_idle(s.sessions, "steer-waiting", turns=2)
        assert snapshot.pending_interrupts == []
        await no_approval_left(s, "steer-waiting")
        assert not await s.sessions.resolve_interrupt("steer-waiting", interrupt_id, approved=True)


async def test_a_cancel_cancels_the_approval_steps_of_the_turn(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        open_model_gates(s)
        await s.stack.start_worker()
        interrupt_id = await waiting_approval(s, "cancel-waiting")
        assert await s.sessions.cancel_turn("cancel-waiting")

        snapshot = await wait_idle(s.sessions, "cancel-waiting", turns=1)
        assert snapshot.pending_interrupts == [] and snapshot.tool_calls == []
        await no_approval_left(s, "cancel-waiting")
        assert not await s.sessions.resolve_interrupt("cancel-waiting", interrupt_id, approved=True)
        # the next turn runs as usual, with nothing of the old one waiting
        assert await s.sessions.send_user_message("cancel-waiting", "hello")
        await wait_idle(s.sessions, "cancel-waiting", turns=2)
        assert await approval_executions(s, "cancel-waiting") == []


# --------------------------------------------------------------------------- snapshots


async def rpc_snapshot(s: Scenario, session_id: str) -> AgentSnapshot:
    snapshot: AgentSnapshot = await s.stack.client.invoke_rpc(s.flow.get_agent_snapshot, session_id)
    return snapshot


async def test_the_snapshot_reads_committed_state_without_a_worker(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("router") as s:
        worker = await s.stack.start_worker()
        # a finished turn (messages, usage), then a turn waiting for an approval
        await s.sessions.start_session("no-worker", "hello")
        await wait_idle(s.sessions, "no-worker", turns=1)
        assert await s.sessions.send_user_message("no-worker", "refund order 7")
        await wait_for_agent_snapshot(
            s.sessions,
            "no-worker",
            lambda snapshot: snapshot.pending_interrupts or None,
            description="a pending approval",
        )
        # with a Worker up, the committed read and the RPC agree exactly
        committed = await s.sessions.get_agent_snapshot("no-worker")
        assert committed == await rpc_snapshot(s, "no-worker")
        assert committed.messages and committed.usage.requests > 0
        assert [c.status for c in committed.tool_calls] == [ToolCallStatus.AWAITING_APPROVAL]

        worker.kill()
        await worker.wait()
        # the person deciding on the approval still sees it, promptly
        during = await asyncio.wait_for(s.sessions.get_agent_snapshot("no-worker"), PROMPT_S)
        assert during == committed
        assert during.pending_interrupts[0].tool_name == "issue_refund"

        # a stopped session reads the same way, with a Worker back
        await s.stack.start_worker()
        await s.sessions.stop_session("no-worker")
        assert await s.sessions.get_agent_snapshot("no-worker") == await rpc_snapshot(
            s, "no-worker"
        )
