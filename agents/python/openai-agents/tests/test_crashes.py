from __future__ import annotations

from dex_agents import AgentInterrupt, AgentSnapshot
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    FileGate,
    WorkerHandle,
    wait_for_agent_snapshot,
)

from tests.agent_defs import MODEL_KIND, tool_kind
from tests.conftest import Scenario, ScenarioFactory, final_answer, wait_idle

SESSION = "crash-1"
NOTE_KEY = f"{SESSION}/turn-1/call_1_0_1"


async def kill_at(s: Scenario, gate_name: str, worker: WorkerHandle) -> None:
    gate = FileGate(s.state_dir, gate_name)
    await gate.wait_until_reached()
    worker.kill()
    gate.release()


async def first_interrupt(s: Scenario) -> AgentInterrupt:
    def probe(snapshot: AgentSnapshot) -> AgentInterrupt | None:
        return next(iter(snapshot.pending_interrupts), None)

    return await wait_for_agent_snapshot(s.sessions, SESSION, probe, description="the approval")


async def test_each_effect_class_runs_as_often_as_its_policy_says_across_kills(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("crash") as s:
        # One response asks for a read, an idempotent write and a refund, in parallel.
        worker = await s.stack.start_worker()
        await s.sessions.start_session(SESSION, "refund my order and add a note")

        # Kill inside the read and the idempotent write at once: both run again.
        read_gate = FileGate(s.state_dir, "lookup_order")
        note_gate = FileGate(s.state_dir, "add_note")
        await read_gate.wait_until_reached()
        await note_gate.wait_until_reached()
        worker.kill()
        read_gate.release()
        note_gate.release()
        worker = await s.stack.start_worker()

        # Approve the refund, then kill inside it: it never runs again.
        interrupt = await first_interrupt(s)
        assert interrupt.tool_name == "issue_refund"
        assert await s.sessions.resolve_interrupt(SESSION, interrupt.interrupt_id, approved=True)
        await kill_at(s, "issue_refund", worker)
        worker = await s.stack.start_worker()

        # Kill inside the model call that follows the tools: only that call repeats.
        await kill_at(s, "model-1-1", worker)
        await s.stack.start_worker()

        snapshot = await wait_idle(s.sessions, SESSION, turns=1)
        assert s.log.count(tool_kind("lookup_order")) == 2
        assert s.log.keys(tool_kind("add_note")) == [NOTE_KEY, NOTE_KEY]
        assert s.log.count(tool_kind("issue_refund")) == 1
        assert s.log.count(MODEL_KIND, "1/0") == 1
        assert s.log.count(MODEL_KIND, "1/1") == 2

        lines = final_answer(snapshot).splitlines()
        assert lines[0] == 'lookup_order: {"order_id":7,"status":"shipped","total":42}'
        assert lines[1] == f"add_note: note added to order 7 with key {NOTE_KEY}"
        assert lines[2].startswith(
            "issue_refund: The outcome of this tool call is unknown: it may or may not have"
        )

        history = await s.stack.read_step_history(SESSION)
        executed = [e for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        steps = [e.step_type for e in executed]
        assert steps.count("RunModel") == 2
        assert [e.final_attempt for e in executed if e.step_type == "CallTool"] == [2, 2]
        assert "CallSingleAttemptTool" not in steps
        assert steps.count("RecordToolOutcomeUnknown") == 1
        assert [e.final_attempt for e in executed if e.step_type == "RunModel"] == [1, 2]
