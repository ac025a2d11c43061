from __future__ import annotations

import json
from pathlib import Path

from dex_agents import AgentSnapshot, ToolCallStatus, ToolEffect
from dex_agents.testing import wait_for_agent_snapshot

from tests.agent_defs import MODEL_KIND, tool_kind
from tests.conftest import Scenario, ScenarioFactory

REQUEST = "My order 1042 arrived broken, refund it"


async def wait_for_approval(s: Scenario, session_id: str, tool_name: str) -> str:
    def pending(snapshot: AgentSnapshot) -> str | None:
        if not snapshot.pending_interrupts:
            return None
        waiting = [c for c in snapshot.tool_calls if c.tool_name == tool_name]
        assert waiting and waiting[0].status is ToolCallStatus.AWAITING_APPROVAL
        return snapshot.pending_interrupts[0].interrupt_id

    return await wait_for_agent_snapshot(
        s.sessions, session_id, pending, description=f"the {tool_name} approval", timeout=90
    )


async def test_approved_refund_runs_once_after_a_worker_kill(scenario: ScenarioFactory) -> None:
    async with scenario("approval") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("a1", REQUEST)
        interrupt_id = await wait_for_approval(s, "a1", "issue_refund")
        snapshot = await s.sessions.get_agent_snapshot("a1")
        refund = [c for c in snapshot.tool_calls if c.tool_name == "issue_refund"][0]
        # No annotation and no explicit policy: unclassified, so it needs approval.
        assert refund.effect is ToolEffect.UNCLASSIFIED and refund.requires_approval
        assert s.log.count(tool_kind("issue_refund")) == 0
        worker.kill()
        await s.stack.start_worker()
        assert await s.sessions.resolve_interrupt("a1", interrupt_id, approved=True)
        snapshot = await s.wait_for_answers("a1", 1)
        assert s.log.count(tool_kind("issue_refund")) == 1
        assert "issue_refund[ok]=refund of $249 issued" in snapshot.messages[-1].text
        # The pending approval held no model call open: four calls, none repeated.
        assert s.log.keys(MODEL_KIND) == [f"turn-1/call-{n}" for n in range(4)]


async def test_rejection_reaches_the_model(scenario: ScenarioFactory) -> None:
    async with scenario("approval") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("j1", REQUEST)
        interrupt_id = await wait_for_approval(s, "j1", "issue_refund")
        assert await s.sessions.resolve_interrupt(
            "j1", interrupt_id, approved=False, rejection_message="customer changed their mind"
        )
        snapshot = await s.wait_for_answers("j1", 1)
        assert s.log.count(tool_kind("issue_refund")) == 0
        final = snapshot.messages[-1].text
        assert "issue_refund[error]=The user rejected this tool call" in final
        assert "customer changed their mind" in final


async def test_builtin_bash_waits_for_a_durable_approval(scenario: ScenarioFactory) -> None:
    async with scenario("bash") as s:
        worker = await s.stack.start_worker()
        target = s.state_dir / "refund.txt"
        await s.sessions.start_session("b1", f"write the refund to {target}")
        interrupt_id = await wait_for_approval(s, "b1", "Bash")
        assert not target.exists()
        worker.kill()
        await s.stack.start_worker()
        assert await s.sessions.resolve_interrupt("b1", interrupt_id, approved=True)
        snapshot = await s.wait_for_answers("b1", 1)
        # Approved, the CLI ran the command itself, in the next model step.
        assert Path(target).read_text().strip() == "refunded"
        assert snapshot.messages[-1].text.startswith("Bash[ok]")


async def test_an_approver_edits_the_refund_before_it_runs(scenario: ScenarioFactory) -> None:
    async with scenario("approval") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("e1", REQUEST)
        interrupt_id = await wait_for_approval(s, "e1", "issue_refund")
        edited = json.dumps({"order_id": 1042, "amount": 120})
        assert await s.sessions.resolve_interrupt("e1", interrupt_id, True, arguments=edited)
        snapshot = await s.wait_for_answers("e1", 1)
        assert s.log.count(tool_kind("issue_refund")) == 1
        final = snapshot.messages[-1].text
        assert "issue_refund[ok]=[The approver changed the arguments; the call ran with" in final
        assert "refund of $120 issued for order 1042" in final
        # The model and the stored conversation see the call as it ran.
        assert s.model.calls[-1].saw_text('"amount": 120')
        assert not s.model.calls[-1].saw_text('"amount": 249')
        assert any('"amount": 120' in m.text for m in snapshot.messages)


async def test_an_approver_edits_a_bash_command_the_cli_then_runs(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("bash") as s:
        await s.stack.start_worker()
        target = s.state_dir / "refund.txt"
        await s.sessions.start_session("e2", f"write the refund to {target}")
        interrupt_id = await wait_for_approval(s, "e2", "Bash")
        edited = json.dumps({"command": f"echo edited-by-approver > {target}"})
        assert await s.sessions.resolve_interrupt("e2", interrupt_id, True, arguments=edited)
        snapshot = await s.wait_for_answers("e2", 1)
        # The CLI ran the approver's command, and the model sees the call as it ran.
        assert target.read_text().strip() == "edited-by-approver"
        last = s.model.calls[-1]
        assert last.saw_text("echo edited-by-approver") and not last.saw_text("echo refunded")
        assert snapshot.messages[-1].text.startswith("Bash[ok]")


async def test_a_rejected_bash_command_never_runs(scenario: ScenarioFactory) -> None:
    async with scenario("bash") as s:
        await s.stack.start_worker()
        target = s.state_dir / "refund.txt"
        await s.sessions.start_session("e3", f"write the refund to {target}")
        interrupt_id = await wait_for_approval(s, "e3", "Bash")
        assert await s.sessions.resolve_interrupt(
            "e3", interrupt_id, approved=False, rejection_message="no shell today"
        )
        snapshot = await s.wait_for_answers("e3", 1)
        assert not target.exists()
        final = snapshot.messages[-1].text
        assert final.startswith("Bash[error]") and "no shell today" in final
