"""A Worker SIGKILL inside each kind of Step of one turn with parallel tool calls."""

from __future__ import annotations

from dex_agents import AgentInterrupt, AgentSnapshot, ToolCallStatus
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    MODEL_CALL_KIND,
    FileGate,
    WorkerHandle,
    tool_call_kind,
    wait_for_agent_snapshot,
)

from tests.conftest import Scenario, ScenarioFactory
from tests.helpers import final_answer, wait_idle

SESSION = "crash-1"


async def kill_at(s: Scenario, worker: WorkerHandle, *gate_names: str) -> WorkerHandle:
    """Wait until every gate is reached, SIGKILL the Worker there, release, restart."""
    gates = [FileGate(s.state_dir, name) for name in gate_names]
    for gate in gates:
        await gate.wait_until_reached()
    worker.kill()
    for gate in gates:
        gate.release()
    return await s.stack.start_worker()


async def test_each_effect_class_runs_as_its_policy_says_across_kills(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("gated") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session(SESSION, "please do everything for order 7")

        # 1. Killed inside the first model call: RunModel runs it again.
        worker = await kill_at(s, worker, "model-0-0")

        # 2. The read and the idempotent write run in parallel Steps; kill inside both.
        worker = await kill_at(s, worker, "lookup_order", "add_note")

        # 3. The refund (single attempt) waits for approval; approve, kill inside it.
        def refund_interrupt(snapshot: AgentSnapshot) -> AgentInterrupt | None:
            done = {c.tool_name: c.status for c in snapshot.tool_calls}
            if done.get("lookup_order") is not ToolCallStatus.SUCCEEDED:
                return None
            if done.get("add_note") is not ToolCallStatus.SUCCEEDED:
                return None
            return next(iter(snapshot.pending_interrupts), None)

        interrupt = await wait_for_agent_snapshot(
            s.sessions, SESSION, refund_interrupt, description="reads done, refund pending"
        )
        assert interrupt.tool_name == "issue_refund"
        assert await s.sessions.resolve_interrupt(SESSION, interrupt.interrupt_id, True)
        worker = await kill_at(s, worker, "issue_refund")

        # 4. Killed inside the model call that reads the results: it runs again.
        worker = await kill_at(s, worker, "model-0-1")
        snapshot = await wait_idle(s.sessions, SESSION, turns=1)

        # Model calls: each killed one ran twice; never a tool inside RunModel.
        assert s.log.keys(MODEL_CALL_KIND) == ["0/0", "0/0", "0/1", "0/1"]
        read_key = f"{SESSION}/turn-1/call_0_0_0"
        note_key = f"{SESSION}/turn-1/call_0_0_1"
        refund_key = f"{SESSION}/turn-1/call_0_0_2"
        assert s.log.keys(tool_call_kind("lookup_order")) == [read_key, read_key]
        assert s.log.keys(tool_call_kind("add_note")) == [note_key, note_key]
        assert s.log.keys(tool_call_kind("issue_refund")) == [refund_key]

        lines = final_answer(snapshot).split("\n")
        assert lines[0].startswith("lookup_order#call_0_0_0: success: ")
        assert lines[1] == (
            f"add_note#call_0_0_1: success: note added to order 7 with key {note_key}"
        )
        # outcome_unknown reaches the model through LangChain's error channel.
        assert lines[2].startswith(
            "issue_refund#call_0_0_2: error: The outcome of this tool call is unknown"
        )

        history = await s.stack.read_step_history(SESSION)
        done = [
            (e.step_type, e.final_attempt)
            for e in history
            if e.event_type == EXECUTE_COMPLETED_EVENT
        ]
        assert done.count(("RunModel", 2)) == 2
        assert done.count(("CallTool", 2)) == 2
        assert ("RecordToolOutcomeUnknown", 1) in done
        assert all(step != "CallSingleAttemptTool" for step, _ in done)
