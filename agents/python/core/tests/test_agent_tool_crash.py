from __future__ import annotations

from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    FileGate,
    tool_call_kind,
    wait_for_agent_snapshot,
)

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import Scenario, ScenarioFactory


async def crash_inside_tool(s: Scenario, session_id: str, request: str, tool: str) -> None:
    """Start a turn that calls ``tool``, SIGKILL the Worker inside it, start another."""
    worker = await s.stack.start_worker()
    await s.sessions.start_session(session_id, request)
    gate = FileGate(s.state_dir, tool)
    await gate.wait_until_reached()
    worker.kill()
    gate.release()
    await s.stack.start_worker()


async def test_a_read_runs_again_after_a_crash(scenario: ScenarioFactory) -> None:
    async with scenario("gated") as s:
        await crash_inside_tool(s, "read-crash", "look up order 7", "lookup_order")
        snapshot = await wait_idle(s.sessions, "read-crash", turns=1)

        key = "read-crash/turn-1/call-0-0"
        assert s.log.count(tool_call_kind("lookup_order"), key) == 2
        assert assistant_texts(snapshot)[-1].startswith("lookup_order#call-0-0: succeeded: ")

        history = await s.stack.read_step_history("read-crash")
        calls = [e for e in history if e.step_type == "CallTool"]
        assert [(e.event_type, e.final_attempt) for e in calls] == [(EXECUTE_COMPLETED_EVENT, 2)]


async def test_an_idempotent_write_runs_again_with_the_same_key(scenario: ScenarioFactory) -> None:
    async with scenario("gated") as s:
        await crash_inside_tool(s, "note-crash", "add a note to order 7", "add_note")
        snapshot = await wait_idle(s.sessions, "note-crash", turns=1)

        key = "note-crash/turn-1/call-0-0"
        assert s.log.keys(tool_call_kind("add_note")) == [key, key]
        # The tool read the same key on its second attempt and reported it.
        assert assistant_texts(snapshot)[-1] == (
            f"add_note#call-0-0: succeeded: note added to order 7 with key {key}"
        )


async def test_a_single_attempt_write_never_runs_again(scenario: ScenarioFactory) -> None:
    async with scenario("gated") as s:
        # The refund needs approval by default: approve it, then crash inside it.
        worker = await s.stack.start_worker()
        await s.sessions.start_session("refund-crash", "refund order 7")
        interrupt = await wait_for_agent_snapshot(
            s.sessions,
            "refund-crash",
            lambda snapshot: next(iter(snapshot.pending_interrupts), None),
            description="the refund approval",
        )
        assert await s.sessions.resolve_interrupt("refund-crash", interrupt.interrupt_id, True)
        gate = FileGate(s.state_dir, "issue_refund")
        await gate.wait_until_reached()
        worker.kill()
        gate.release()
        await s.stack.start_worker()

        snapshot = await wait_idle(s.sessions, "refund-crash", turns=1)
        assert s.log.count(tool_call_kind("issue_refund")) == 1
        answer = assistant_texts(snapshot)[-1]
        assert answer.startswith("issue_refund#call-0-0: outcome_unknown: ")

        history = await s.stack.read_step_history("refund-crash")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert "CallSingleAttemptTool" not in executed
        assert executed.count("RecordToolOutcomeUnknown") == 1
