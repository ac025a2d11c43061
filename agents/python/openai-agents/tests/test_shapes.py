"""Documented OpenAI Agents SDK shapes, several turns each, against their plain SDK run.

Each test runs the shape durably (a real server, Worker children SIGKILLed at a pending
approval and inside a model call) and then plainly with the SDK alone as the control
(``Runner.run`` per turn, the next turn from ``result.last_agent`` and
``result.to_input_list()``), and checks: every model call is its own RunModel Step and
every tool call its own tool Step, the non-idempotent write ran as often as in the
control, each model saw exactly what it saw in the control (instructions, tools, input),
and the stored conversation and each turn's answer equal the control's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentInterrupt,
    AgentMessage,
    AgentSessionClient,
    AgentSnapshot,
    MessageRole,
    ToolCallStatus,
)
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    FileGate,
    InvocationLog,
    WorkerHandle,
    wait_for_agent_snapshot,
)

from dex_agents_openai_agents._items import GUARDRAIL_NOTE_TYPE, input_items
from tests.shape_defs import (
    APPROVALS,
    GATES_ENV,
    GUARDED,
    MODEL_KIND,
    PROMPTS,
    SHAPE_ENV,
    STATE_DIR_ENV,
    TRIAGE,
    ShapeDesk,
    build_flow,
    control_run,
    gate_name,
    tool_kind,
)

PACKAGE_DIR = Path(__file__).resolve().parents[1]
# Generous: a Worker kill is noticed by the server within seconds, more on a loaded machine.
PATIENCE_S = 120.0

# Two Worker kills each; recovery from a kill takes the server several seconds.
pytestmark = pytest.mark.timeout(300)


@asynccontextmanager
async def shape_stack(
    tmp_path: Path, shape: str, gates: Sequence[str]
) -> AsyncIterator[tuple[AgentTestStack, AgentSessionClient, Path]]:
    state_dir = tmp_path / "durable"
    state_dir.mkdir()
    flow = build_flow(shape, state_dir)
    env = {SHAPE_ENV: shape, STATE_DIR_ENV: str(state_dir), GATES_ENV: ",".join(gates)}
    async with AgentTestStack(
        tmp_path, [flow], "tests.shape_worker", worker_cwd=PACKAGE_DIR, worker_env=env
    ) as stack:
        yield stack, stack.sessions(flow), state_dir


async def wait_for_turns(
    sessions: AgentSessionClient, session_id: str, count: int
) -> AgentSnapshot:
    def done(snapshot: AgentSnapshot) -> AgentSnapshot | None:
        state = snapshot.state
        if state is None or state.active_turn_id is not None or state.turn_count < count:
            return None
        return snapshot

    return await wait_for_agent_snapshot(
        sessions, session_id, done, description=f"{count} turn(s)", timeout=PATIENCE_S
    )


async def pending_approval(
    sessions: AgentSessionClient, session_id: str, tool_name: str, *, settled: Sequence[str] = ()
) -> AgentInterrupt:
    """The one pending approval, once it is for ``tool_name`` and ``settled`` calls ended."""

    def probe(snapshot: AgentSnapshot) -> AgentInterrupt | None:
        final = {c.tool_name for c in snapshot.tool_calls if c.status.is_final}
        if not snapshot.pending_interrupts or not set(settled) <= final:
            return None
        [interrupt] = snapshot.pending_interrupts
        assert interrupt.tool_name == tool_name
        return interrupt

    return await wait_for_agent_snapshot(
        sessions, session_id, probe, description=f"the {tool_name} approval", timeout=PATIENCE_S
    )


async def kill_inside(
    stack: AgentTestStack, state_dir: Path, gate: str, worker: WorkerHandle
) -> WorkerHandle:
    """SIGKILL the Worker once it is inside the gated model call; start another."""
    file_gate = FileGate(state_dir, gate)
    await file_gate.wait_until_reached(timeout=PATIENCE_S)
    worker.kill()
    file_gate.release()
    return await stack.start_worker()


async def events_of(
    sessions: AgentSessionClient, session_id: str, *, turns: int
) -> list[AgentEvent]:
    """The session's retained events, oldest first, through its ``turns``-th completed turn."""
    events: list[AgentEvent] = []
    async with asyncio.timeout(PATIENCE_S):
        async for event in sessions.follow_events(session_id):
            events.append(event)
            if sum(e.type is AgentEventType.TURN_COMPLETED for e in events) == turns:
                return events
    raise AssertionError("unreachable: follow_events never ends by itself")


def plain(value: Any) -> Any:
    """JSON as it is stored: key order and tuples aside."""
    return json.loads(json.dumps(value, sort_keys=True, default=str))


def turn_answers(messages: Sequence[AgentMessage]) -> list[str]:
    """Each turn's answer: its last assistant message, or the guardrail that ended it."""
    answers: dict[str, str] = {}
    for message in messages:
        item = message.framework_item
        if message.role is not MessageRole.ASSISTANT:
            continue
        if item.get("type") == GUARDRAIL_NOTE_TYPE:
            answers[message.turn_id] = f"{item['error']}: {item['guardrail']}"
        elif item.get("type") == "message":
            answers[message.turn_id] = message.text
    return list(answers.values())


async def run_model_steps(stack: AgentTestStack, session_id: str) -> list[int]:
    """The final attempt of every RunModel Step execution, in order."""
    history = await stack.read_step_history(session_id)
    return [
        e.final_attempt
        for e in history
        if e.event_type == EXECUTE_COMPLETED_EVENT and e.step_type == "RunModel"
    ]


async def check_against_control(
    stack: AgentTestStack,
    sessions: AgentSessionClient,
    shape: str,
    session_id: str,
    state_dir: Path,
    tmp_path: Path,
    *,
    blocked_turns: int = 0,
) -> None:
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    control = await control_run(shape, control_dir)
    durable = ShapeDesk(shape, state_dir)
    snapshot = await sessions.get_agent_snapshot(session_id)

    # Every model (guardrail agents' included) saw, call by call, what it saw plainly.
    assert durable.model_inputs() == control.desk.model_inputs()
    # The conversation the next turn would continue from is the plain run's.
    assert plain(input_items(snapshot.messages)) == plain(control.history)
    assert turn_answers(snapshot.messages) == control.outputs
    # Each model call of the agents was its own RunModel Step (guardrail agents run
    # inside the Step of the agent they guard; a blocking input guardrail that trips ends
    # its Step before the agent's call).
    agent_calls = [
        key for key in control.desk.log.keys(MODEL_KIND) if not key.startswith("Guardrail")
    ]
    steps = await run_model_steps(stack, session_id)
    assert len(steps) == len(agent_calls) + blocked_turns
    assert durable.refunds() == control.desk.refunds()


async def test_triage_handoffs_across_a_pending_approval_and_a_model_call_kill(
    tmp_path: Path,
) -> None:
    # The quickstart's triage agent with handoffs=[billing, faq]; billing reads the order
    # and issues a needs_approval=True refund; turn 2 starts with the billing agent.
    handed = gate_name("Billing agent", 1, 1)  # the first call after the handoff
    later = gate_name("Billing agent", 2, 0)
    async with shape_stack(tmp_path, TRIAGE, [handed, later]) as (stack, sessions, state_dir):
        log = InvocationLog(state_dir / "calls.log")
        desk = ShapeDesk(TRIAGE, state_dir)
        worker = await stack.start_worker()
        await sessions.start_session("t1", PROMPTS[TRIAGE][0])
        # SIGKILL inside the billing agent's call: the triage agent's Step, which made
        # the handoff, is not repeated.
        worker = await kill_inside(stack, state_dir, handed, worker)
        interrupt = await pending_approval(sessions, "t1", "issue_refund", settled=["lookup_order"])
        worker.kill()  # SIGKILL while the approval is pending
        worker = await stack.start_worker()
        assert desk.refunds() == []
        assert await sessions.resolve_interrupt("t1", interrupt.interrupt_id, approved=True)
        first = await wait_for_turns(sessions, "t1", 1)
        assert first.state is not None and first.state.last_turn_error is None

        assert await sessions.send_user_message("t1", PROMPTS[TRIAGE][1])
        await kill_inside(stack, state_dir, later, worker)  # SIGKILL inside turn 2's call
        await wait_for_turns(sessions, "t1", 2)

        assert desk.refunds() == ["1042:249"]
        assert log.count(tool_kind("issue_refund")) == 1
        assert log.count(tool_kind("lookup_order")) == 1
        # The handoff ended the triage agent's Step; billing's call was the next Step,
        # and turn 2 went straight to the billing agent (the turn's last_agent).
        assert log.keys(MODEL_KIND) == [
            "Triage agent/turn-1/call-0",
            "Billing agent/turn-1/call-1",
            "Billing agent/turn-1/call-1",
            "Billing agent/turn-1/call-2",
            "Billing agent/turn-2/call-0",
            "Billing agent/turn-2/call-0",
        ]
        # A killed call runs again at the next attempt, or at the same one when the
        # server redelivers a task that had sent no output yet.
        assert len(await run_model_steps(stack, "t1")) == 4
        history = await stack.read_step_history("t1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("CallTool") == 1
        assert executed.count("CallSingleAttemptTool") == 1
        events = await events_of(sessions, "t1", turns=2)
        continued = [e.data for e in events if e.type is AgentEventType.TURN_CONTINUED]
        assert continued == [{"reason": "handoff", "model_calls": 1}]
        await check_against_control(stack, sessions, TRIAGE, "t1", state_dir, tmp_path)


async def test_needs_approval_adds_and_waives_approvals_across_kills(tmp_path: Path) -> None:
    # add_note (idempotent_write: no approval by default) has needs_approval=True;
    # issue_refund (non_idempotent_write: approval by default, which the policy lets the
    # framework waive) asks only above $100 through its needs_approval function.
    gate = gate_name("Refund desk", 2, 1)
    async with shape_stack(tmp_path, APPROVALS, [gate]) as (stack, sessions, state_dir):
        log = InvocationLog(state_dir / "calls.log")
        desk = ShapeDesk(APPROVALS, state_dir)
        worker = await stack.start_worker()
        await sessions.start_session("a1", PROMPTS[APPROVALS][0])
        note = await pending_approval(sessions, "a1", "add_note", settled=["issue_refund"])
        snapshot = await sessions.get_agent_snapshot("a1")
        approval = {c.tool_name: c.requires_approval for c in snapshot.tool_calls}
        assert approval == {"issue_refund": False, "add_note": True}
        assert desk.refunds() == ["1042:30"]  # ran without an approval
        worker.kill()  # SIGKILL while the note's approval is pending
        worker = await stack.start_worker()
        assert await sessions.resolve_interrupt("a1", note.interrupt_id, approved=True)
        await wait_for_turns(sessions, "a1", 1)

        assert await sessions.send_user_message("a1", PROMPTS[APPROVALS][1])
        refund = await pending_approval(sessions, "a1", "issue_refund")
        snapshot = await sessions.get_agent_snapshot("a1")
        assert [c.status for c in snapshot.tool_calls] == [ToolCallStatus.AWAITING_APPROVAL]
        assert desk.refunds() == ["1042:30"]
        assert await sessions.resolve_interrupt("a1", refund.interrupt_id, approved=True)
        await kill_inside(stack, state_dir, gate, worker)  # SIGKILL inside the last call
        await wait_for_turns(sessions, "a1", 2)

        assert desk.refunds() == ["1042:30", "1042:219"]
        assert log.count(tool_kind("issue_refund")) == 2
        assert log.count(tool_kind("add_note")) == 1
        assert log.keys(MODEL_KIND) == [
            "Refund desk/turn-1/call-0",
            "Refund desk/turn-1/call-1",
            "Refund desk/turn-2/call-0",
            "Refund desk/turn-2/call-1",
            "Refund desk/turn-2/call-1",
        ]
        assert len(await run_model_steps(stack, "a1")) == 4
        history = await stack.read_step_history("a1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("CallSingleAttemptTool") == 2  # the two refunds
        assert executed.count("CallTool") == 1  # the note, an idempotent write
        assert executed.count("AwaitToolApproval") == 2  # the note and the $219 refund
        await check_against_control(stack, sessions, APPROVALS, "a1", state_dir, tmp_path)


async def test_guardrail_tripwires_end_the_turn_once_with_a_visible_answer(
    tmp_path: Path,
) -> None:
    # The quickstart's homework input guardrail (a guardrail agent with output_type) on a
    # triage agent, and an output guardrail on the history tutor it hands off to. The
    # tripped turn is left out of the model's input, as a plain run's raise leaves it out,
    # so turn 2's input holds one user message.
    gate = gate_name("History tutor", 1, 1)
    async with shape_stack(tmp_path, GUARDED, [gate]) as (stack, sessions, state_dir):
        log = InvocationLog(state_dir / "calls.log")
        worker = await stack.start_worker()
        await sessions.start_session("g1", PROMPTS[GUARDED][0])
        first = await wait_for_turns(sessions, "g1", 1)
        # One RunModel attempt, one guardrail model call, no agent model call, no error.
        assert await run_model_steps(stack, "g1") == [1]
        assert log.keys(MODEL_KIND) == ["Guardrail check/turn-1/call-0"]
        assert first.state is not None and first.state.last_turn_error is None
        note = first.messages[-1]
        assert note.role is MessageRole.ASSISTANT
        assert note.text.startswith(
            "InputGuardrailTripwireTriggered: the input guardrail 'homework_guardrail' "
            "triggered its tripwire"
        )
        assert '"is_homework": true' in note.text

        assert await sessions.send_user_message("g1", PROMPTS[GUARDED][1])
        await kill_inside(stack, state_dir, gate, worker)  # SIGKILL inside the tutor's call
        await wait_for_turns(sessions, "g1", 2)
        assert await sessions.send_user_message("g1", PROMPTS[GUARDED][2])
        third = await wait_for_turns(sessions, "g1", 3)
        assert third.messages[-1].text.startswith(
            "OutputGuardrailTripwireTriggered: the output guardrail 'no_spoilers'"
        )
        # The blocked answer is not stored: the turn holds its user message and the note.
        assert [m.role for m in third.messages if m.turn_id == "turn-3"] == [
            MessageRole.USER,
            MessageRole.ASSISTANT,
        ]
        assert log.keys(MODEL_KIND) == [
            "Guardrail check/turn-1/call-0",
            "Guardrail check/turn-1/call-0",
            "Triage agent/turn-1/call-0",
            "History tutor/turn-1/call-1",
            "History tutor/turn-1/call-1",
            "History tutor/turn-2/call-0",
        ]
        assert len(await run_model_steps(stack, "g1")) == 4
        await check_against_control(
            stack, sessions, GUARDED, "g1", state_dir, tmp_path, blocked_turns=1
        )
