"""Documented Pydantic AI agent shapes, two turns each, against their plain Pydantic AI run.

Each test runs the shape durably (a real server, Worker children SIGKILLed at a pending
approval or inside a model call) and then plainly with Pydantic AI alone as the control,
and checks: every model call and tool call is its own Step, the non-idempotent write ran
once, the model saw exactly what it saw in the control (system prompts included), and
the stored conversation and structured outputs equal the control's.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSnapshot,
    MessageRole,
    ToolCallStatus,
    ToolEffect,
)
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    FileGate,
    InvocationLog,
    WorkerHandle,
    wait_for_agent_snapshot,
)
from pydantic import ValidationError
from pydantic_ai.messages import ModelResponse, ToolCallPart, ToolReturnPart

from dex_agents_pydantic_ai import VALIDATION_RETRY
from dex_agents_pydantic_ai._items import history_of
from tests.shape_defs import (
    CONDITIONAL,
    FIRST_PROMPT,
    FLAGSHIP,
    MODEL_KIND,
    RETRIED,
    SECOND_PROMPT,
    SHAPE_ENV,
    STATE_DIR_ENV,
    TOOLSET,
    VALIDATED,
    Resolution,
    ShapeDesk,
    build_flow,
    control_run,
    conversation_view,
    read_lines,
    tool_kind,
)

PACKAGE_DIR = Path(__file__).resolve().parents[1]


@asynccontextmanager
async def shape_stack(
    tmp_path: Path, shape: str, gates: Sequence[str]
) -> AsyncIterator[tuple[AgentTestStack, AgentSessionClient, Path]]:
    state_dir = tmp_path / "durable"
    state_dir.mkdir()
    flow = build_flow(shape, state_dir)
    env = {
        SHAPE_ENV: shape,
        STATE_DIR_ENV: str(state_dir),
        "PYDANTIC_AI_SHAPE_GATES": ",".join(gates),
    }
    async with AgentTestStack(
        tmp_path, [flow], "tests.shape_worker", worker_cwd=PACKAGE_DIR, worker_env=env
    ) as stack:
        yield stack, stack.sessions(flow), state_dir


async def wait_for_turns(sessions: AgentSessionClient, session_id: str, count: int) -> None:
    def done(snapshot: AgentSnapshot) -> AgentSnapshot | None:
        state = snapshot.state
        if state is None or state.active_turn_id is not None:
            return None
        users = [m for m in snapshot.messages if m.role is MessageRole.USER]
        return snapshot if len(users) >= count else None

    await wait_for_agent_snapshot(sessions, session_id, done, description=f"{count} turn(s)")


def outputs_of(messages: Sequence[ModelResponse | object]) -> list[Resolution]:
    """The structured outputs the turns gave: every valid ``final_result`` call.

    A call that failed validation (and made Pydantic AI ask again) is left out.
    """
    outputs: list[Resolution] = []
    for message in messages:
        if not isinstance(message, ModelResponse):
            continue
        for part in message.parts:
            if isinstance(part, ToolCallPart) and part.tool_name == "final_result":
                try:
                    outputs.append(Resolution.model_validate_json(part.args_as_json_str()))
                except ValidationError:
                    continue
    return outputs


async def check_against_control(
    stack: AgentTestStack,
    sessions: AgentSessionClient,
    shape: str,
    session_id: str,
    state_dir: Path,
    tmp_path: Path,
    *,
    model_calls: int,
    reads: int,
    writes: int = 1,
) -> None:
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    control, control_outputs, control_history = await control_run(
        shape, control_dir, [FIRST_PROMPT, SECOND_PROMPT]
    )
    durable = ShapeDesk(shape, state_dir)
    snapshot = await sessions.get_agent_snapshot(session_id)
    stored = history_of(snapshot.messages)

    # The model saw, call by call, what it saw in the plain run: the system prompt,
    # customer and dynamic refund count, tool returns, and the merged turn-2 request.
    assert durable.model_inputs() == control.model_inputs()
    # The stored conversation is the plain run's (dynamic system prompts are re-evaluated
    # on every call, so their stored text is the first one).
    assert conversation_view(stored, static_only=True) == conversation_view(
        control_history, static_only=True
    )
    assert outputs_of(stored) == control_outputs
    assert [m.role for m in snapshot.messages][:2] == [MessageRole.USER, MessageRole.SYSTEM]

    # Every model call is its own RunModel Step: as many as the plain run made.
    history = await stack.read_step_history(session_id)
    executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
    assert executed.count("RunModel") == control.log.count(MODEL_KIND) == model_calls
    assert executed.count("CallTool") == reads  # lookup_order, a read
    assert executed.count("CallSingleAttemptTool") == writes  # the non-idempotent writes
    # The output validator ran on the structured outputs, as in the plain run.
    assert set(durable.log.keys("validator")) == set(control.log.keys("validator"))


async def test_flagship_shape_across_a_pending_approval_and_a_model_call_kill(
    tmp_path: Path,
) -> None:
    # output_type=[Resolution, DeferredToolRequests], system_prompt= and
    # @agent.system_prompt (static and dynamic) reading deps, deps tools, a
    # requires_approval=True refund, an output validator, FunctionModel without streaming.
    gate_name = "model-turn-2-call-0"
    async with shape_stack(tmp_path, FLAGSHIP, [gate_name]) as (stack, sessions, state_dir):
        log = InvocationLog(state_dir / "calls.log")
        worker = await stack.start_worker()
        await sessions.start_session("f1", FIRST_PROMPT)

        def awaiting(snapshot: AgentSnapshot) -> str | None:
            refund = [c for c in snapshot.tool_calls if c.tool_name == "issue_refund"]
            lookup = [c for c in snapshot.tool_calls if c.tool_name == "lookup_order"]
            if not (snapshot.pending_interrupts and lookup and lookup[0].status.is_final):
                return None
            assert refund[0].status is ToolCallStatus.AWAITING_APPROVAL
            assert refund[0].requires_approval and refund[0].effect is ToolEffect.UNCLASSIFIED
            assert lookup[0].effect is ToolEffect.READ
            return snapshot.pending_interrupts[0].interrupt_id

        interrupt_id = await wait_for_agent_snapshot(
            sessions, "f1", awaiting, description="the refund approval"
        )
        worker.kill()  # SIGKILL while the approval is pending
        worker = await stack.start_worker()
        assert read_lines(state_dir / "refunds.txt") == []
        assert await sessions.resolve_interrupt("f1", interrupt_id, approved=True)
        await wait_for_turns(sessions, "f1", 1)

        assert await sessions.send_user_message("f1", SECOND_PROMPT)
        gate = FileGate(state_dir, gate_name)
        await gate.wait_until_reached()
        worker.kill()  # SIGKILL inside turn 2's model call
        gate.release()
        await stack.start_worker()
        await wait_for_turns(sessions, "f1", 2)

        # The approved non-idempotent refund ran once; only the killed model call repeated.
        assert read_lines(state_dir / "refunds.txt") == ["1042:249"]
        assert log.count(tool_kind("issue_refund")) == 1
        assert log.keys(MODEL_KIND) == [
            "turn-1/call-0",
            "turn-1/call-1",
            "turn-2/call-0",
            "turn-2/call-0",
        ]
        await check_against_control(
            stack, sessions, FLAGSHIP, "f1", state_dir, tmp_path, model_calls=3, reads=1
        )


async def test_validated_structured_output_across_a_model_call_kill(tmp_path: Path) -> None:
    # output_type=Resolution with an output validator (no DeferredToolRequests of its
    # own), system prompts, a non-idempotent add_note, a streaming FunctionModel.
    gate_name = "model-turn-1-call-1"
    async with shape_stack(tmp_path, VALIDATED, [gate_name]) as (stack, sessions, state_dir):
        log = InvocationLog(state_dir / "calls.log")
        worker = await stack.start_worker()
        await sessions.start_session("v1", FIRST_PROMPT)
        gate = FileGate(state_dir, gate_name)
        await gate.wait_until_reached()
        worker.kill()  # SIGKILL inside the model call that gives the structured output
        gate.release()
        await stack.start_worker()
        await wait_for_turns(sessions, "v1", 1)
        assert await sessions.send_user_message("v1", SECOND_PROMPT)
        await wait_for_turns(sessions, "v1", 2)

        assert read_lines(state_dir / "notes.txt") == ["1042:broken"]
        assert log.count(tool_kind("add_note")) == 1
        assert log.keys(MODEL_KIND) == [
            "turn-1/call-0",
            "turn-1/call-1",
            "turn-1/call-1",
            "turn-2/call-0",
            "turn-2/call-1",
        ]
        await check_against_control(
            stack, sessions, VALIDATED, "v1", state_dir, tmp_path, model_calls=4, reads=2
        )


async def test_a_tools_own_approval_request_is_never_bypassed(tmp_path: Path) -> None:
    # write_file raises ApprovalRequired for .env only; its policy (idempotent_write) asks
    # for no approval, so the session never approves it: the .env call must not write.
    async with shape_stack(tmp_path, CONDITIONAL, []) as (stack, sessions, state_dir):
        await stack.start_worker()
        await sessions.start_session("c1", "Set the project up")
        await wait_for_turns(sessions, "c1", 1)
        snapshot = await sessions.get_agent_snapshot("c1")

        assert not (state_dir / ".env").exists()
        assert (state_dir / "README").read_text() == "hi"
        answer = snapshot.messages[-1].text
        assert "t1-doc=wrote README" in answer
        assert "t1-env=" in answer and "raised ApprovalRequired" in answer
        assert "requires_approval=True" in answer
        stored = history_of(snapshot.messages)
        outcomes = {
            part.tool_call_id: part.outcome
            for message in stored
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        }
        assert outcomes == {"t1-env": "failed", "t1-doc": "success"}


async def approve_refund_after_a_kill(
    stack: AgentTestStack, sessions: AgentSessionClient, session_id: str, worker: WorkerHandle
) -> WorkerHandle:
    """Wait for the $249 refund's approval, SIGKILL the Worker, approve it on a new one."""

    def awaiting(snapshot: AgentSnapshot) -> str | None:
        lookup = [c for c in snapshot.tool_calls if c.tool_name == "lookup_order"]
        # every other call of the turn has finished: the kill hits the pending approval only
        settled = all(
            c.status.is_final or c.status is ToolCallStatus.AWAITING_APPROVAL
            for c in snapshot.tool_calls
        )
        if not (snapshot.pending_interrupts and lookup and settled):
            return None
        (interrupt,) = snapshot.pending_interrupts
        assert json.loads(interrupt.arguments) == {"order_id": 1042, "amount": 249}
        return interrupt.interrupt_id

    interrupt_id = await wait_for_agent_snapshot(
        sessions, session_id, awaiting, description="the refund approval"
    )
    worker.kill()  # SIGKILL while the approval is pending
    worker = await stack.start_worker()
    assert await sessions.resolve_interrupt(session_id, interrupt_id, approved=True)
    return worker


async def test_validation_retries_each_get_their_own_model_call_step(tmp_path: Path) -> None:
    # Invalid tool arguments in turn 1, a structured output missing a field in turn 2:
    # Pydantic AI asks the model again each time (ContinueTurn "validation_retry"), each
    # call in its own RunModel Step; a streaming FunctionModel.
    gate_name = "model-turn-1-call-1"
    async with shape_stack(tmp_path, RETRIED, [gate_name]) as (stack, sessions, state_dir):
        log = InvocationLog(state_dir / "calls.log")
        worker = await stack.start_worker()
        await sessions.start_session("r1", FIRST_PROMPT)
        gate = FileGate(state_dir, gate_name)
        await gate.wait_until_reached()
        worker.kill()  # SIGKILL inside the model call that follows the first retry request
        gate.release()
        worker = await stack.start_worker()
        worker = await approve_refund_after_a_kill(stack, sessions, "r1", worker)
        await wait_for_turns(sessions, "r1", 1)
        assert await sessions.send_user_message("r1", SECOND_PROMPT)
        await wait_for_turns(sessions, "r1", 2)

        snapshot = await sessions.get_agent_snapshot("r1")
        assert snapshot.state is not None and snapshot.state.last_turn_error is None
        assert read_lines(state_dir / "refunds.txt") == ["1042:249"]
        assert log.count(tool_kind("issue_refund")) == 1
        assert log.count(tool_kind("lookup_order")) == 1  # the invalid call never ran
        # The call before the kill ran once; only the killed one repeated.
        assert log.keys(MODEL_KIND) == [
            "turn-1/call-0",
            "turn-1/call-1",
            "turn-1/call-1",
            "turn-1/call-2",
            "turn-2/call-0",
            "turn-2/call-1",
        ]
        events = [e async for e in follow_until_turns(sessions, "r1", 2)]
        continued = [(e.turn_id, e.data) for e in events if e.type is AgentEventType.TURN_CONTINUED]
        retry = {"reason": VALIDATION_RETRY, "model_calls": 1}
        assert continued == [("turn-1", retry), ("turn-2", retry)]
        await check_against_control(
            stack, sessions, RETRIED, "r1", state_dir, tmp_path, model_calls=5, reads=1
        )


async def test_an_approval_toolsets_function_decides_per_call(tmp_path: Path) -> None:
    # The refund toolset's approval_required function asks for approval above $100 only:
    # the $20 refund runs without one, the $249 refund waits for a person.
    gate_name = "model-turn-2-call-0"
    async with shape_stack(tmp_path, TOOLSET, [gate_name]) as (stack, sessions, state_dir):
        log = InvocationLog(state_dir / "calls.log")
        worker = await stack.start_worker()
        await sessions.start_session("t1", FIRST_PROMPT)
        worker = await approve_refund_after_a_kill(stack, sessions, "t1", worker)
        await wait_for_turns(sessions, "t1", 1)
        snapshot = await sessions.get_agent_snapshot("t1")
        assert snapshot.state is not None and snapshot.state.last_turn_error is None

        assert await sessions.send_user_message("t1", SECOND_PROMPT)
        gate = FileGate(state_dir, gate_name)
        await gate.wait_until_reached()
        worker.kill()  # SIGKILL inside turn 2's model call
        gate.release()
        await stack.start_worker()
        await wait_for_turns(sessions, "t1", 2)

        assert sorted(read_lines(state_dir / "refunds.txt")) == ["1042:20", "1042:249"]
        assert log.count(tool_kind("issue_refund")) == 2
        assert log.keys(MODEL_KIND) == [
            "turn-1/call-0",
            "turn-1/call-1",
            "turn-2/call-0",
            "turn-2/call-0",
        ]
        events = [e async for e in follow_until_turns(sessions, "t1", 2)]
        deferred = {
            e.data["tool_call_id"]: (e.data["effect"], e.data["requires_approval"])
            for e in events
            if e.type is AgentEventType.TOOL_CALL_DEFERRED
        }
        assert deferred == {
            "t1-lookup": ("read", False),
            "t1-small": ("unclassified", False),
            "t1-refund": ("unclassified", True),
        }
        await check_against_control(
            stack, sessions, TOOLSET, "t1", state_dir, tmp_path, model_calls=3, reads=1, writes=2
        )


async def follow_until_turns(
    sessions: AgentSessionClient, session_id: str, turns: int
) -> AsyncIterator[AgentEvent]:
    """The session's events from the start up to its ``turns``-th ``turn_completed``."""
    seen = 0
    async with asyncio.timeout(30):
        async for event in sessions.follow_events(session_id):
            yield event
            if event.type is AgentEventType.TURN_COMPLETED:
                seen += 1
                if seen == turns:
                    return
