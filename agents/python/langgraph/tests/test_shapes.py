"""Documented LangGraph agent shapes, two turns each, against their plain LangGraph run.

Each test runs the shape durably (a real server, Worker children SIGKILLed at a pending
approval or question and inside a model call) and then plainly with LangGraph alone (an
in-memory checkpointer, ``Command(resume=...)`` with the same answers) as the control,
and checks: every model call is its own RunModel Step and every tool call its own tool
Step, the non-idempotent write ran once, and the stored conversation and the graph's
state equal the control's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from dex_agents import (
    AgentInterrupt,
    AgentSessionClient,
    AgentSnapshot,
    InterruptKind,
    MessageRole,
    ToolCallStatus,
)
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    FileGate,
    WorkerHandle,
    wait_for_agent_snapshot,
)
from langgraph.checkpoint.memory import InMemorySaver

from dex_agents_langgraph._items import carried_state, from_stored
from tests.shape_defs import (
    CUSTOMER_ANSWER,
    EDITED_REFUND,
    FIRST_PROMPT,
    GATES_ENV,
    HITL,
    HITL_PER_CALL,
    MODEL_KIND,
    NODE_INTERRUPT,
    NOTE_REJECTION,
    REVIEW_ANSWER,
    ROUTER,
    SECOND_PROMPT,
    SHAPE_ENV,
    STATE_DIR_ENV,
    STATE_TOOLS,
    SUBGRAPH,
    TOOL_INTERRUPT,
    ShapeDesk,
    build_flow,
    control_run,
    message_view,
    read_lines,
    tool_kind,
)

PACKAGE_DIR = Path(__file__).resolve().parents[1]


class Durable:
    """One shape's stack: the server, the Worker children and the sessions client."""

    def __init__(
        self, stack: AgentTestStack, sessions: AgentSessionClient, state_dir: Path
    ) -> None:
        self.stack = stack
        self.sessions = sessions
        self.state_dir = state_dir
        self.desk_log = ShapeDesk("", state_dir).log

    async def kill_at_gate(self, worker: WorkerHandle, name: str) -> WorkerHandle:
        """SIGKILL the Worker while a model call waits at gate ``name``; restart it."""
        gate = FileGate(self.state_dir, name)
        await gate.wait_until_reached()
        worker.kill()
        gate.release()
        return await self.stack.start_worker()

    async def interrupts(
        self, session_id: str, count: int, kind: InterruptKind
    ) -> list[AgentInterrupt]:
        def pending(snapshot: AgentSnapshot) -> list[AgentInterrupt] | None:
            found = [i for i in snapshot.pending_interrupts if i.kind == kind]
            return found if len(found) >= count else None

        return await wait_for_agent_snapshot(
            self.sessions, session_id, pending, description=f"{count} pending {kind}(s)"
        )

    async def turns(self, session_id: str, count: int) -> AgentSnapshot:
        def done(snapshot: AgentSnapshot) -> AgentSnapshot | None:
            state = snapshot.state
            if state is None or state.active_turn_id is not None:
                return None
            users = [m for m in snapshot.messages if m.role is MessageRole.USER]
            return snapshot if len(users) >= count else None

        return await wait_for_agent_snapshot(
            self.sessions, session_id, done, description=f"{count} turn(s)"
        )

    async def executed_steps(self, session_id: str) -> list[str]:
        history = await self.stack.read_step_history(session_id)
        return [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]


@asynccontextmanager
async def shape_stack(tmp_path: Path, shape: str, gates: Sequence[str]) -> AsyncIterator[Durable]:
    state_dir = tmp_path / "durable"
    state_dir.mkdir()
    flow = build_flow(shape, state_dir)
    env = {SHAPE_ENV: shape, STATE_DIR_ENV: str(state_dir), GATES_ENV: ",".join(gates)}
    async with AgentTestStack(
        tmp_path, [flow], "tests.shape_worker", worker_cwd=PACKAGE_DIR, worker_env=env
    ) as stack:
        yield Durable(stack, stack.sessions(flow), state_dir)


async def check_against_control(
    durable: Durable,
    shape: str,
    session_id: str,
    tmp_path: Path,
    *,
    state_keys: Sequence[str] = (),
    tool_steps: int,
    resumes_without_model: int = 0,
) -> tuple[ShapeDesk, dict[str, Any]]:
    control_dir = tmp_path / "control"
    control_dir.mkdir()
    control, values = await control_run(shape, control_dir, [FIRST_PROMPT, SECOND_PROMPT])
    snapshot = await durable.sessions.get_agent_snapshot(session_id)
    stored = from_stored(snapshot.messages)

    # The conversation is the plain run's, message by message.
    assert [message_view(m) for m in stored] == [message_view(m) for m in values["messages"]]
    # So is the rest of the graph's state, carried from turn to turn.
    kept = carried_state(snapshot.messages, set(state_keys), InMemorySaver().serde)
    assert kept == {k: values[k] for k in state_keys}

    # Every model call is its own RunModel Step: as many as the plain run made (plus the
    # Steps that only resumed the graph after a node's interrupt, without a model call).
    executed = await durable.executed_steps(session_id)
    assert executed.count("RunModel") == control.log.count(MODEL_KIND) + resumes_without_model
    tools = executed.count("CallTool") + executed.count("CallSingleAttemptTool")
    assert tools == tool_steps
    return control, values


async def test_an_interrupt_inside_a_tool_is_a_durable_question(tmp_path: Path) -> None:
    # The human-in-the-loop tutorial: ask_customer calls interrupt(); a refund follows.
    gate = "model-agent-0-1"
    async with shape_stack(tmp_path, TOOL_INTERRUPT, [gate]) as d:
        worker = await d.stack.start_worker()
        await d.sessions.start_session("ti", FIRST_PROMPT)
        [question] = await d.interrupts("ti", 1, InterruptKind.QUESTION)
        assert question.tool_name == "ask_customer"
        snapshot = await d.sessions.get_agent_snapshot("ti")
        lookup = next(c for c in snapshot.tool_calls if c.tool_name == "lookup_order")
        assert lookup.status is ToolCallStatus.SUCCEEDED
        worker.kill()  # SIGKILL while the question is pending
        worker = await d.stack.start_worker()
        assert await d.sessions.resolve_interrupt(
            "ti", question.interrupt_id, True, answer=CUSTOMER_ANSWER
        )
        worker = await d.kill_at_gate(worker, gate)  # SIGKILL inside the next model call
        await d.turns("ti", 1)
        assert await d.sessions.send_user_message("ti", SECOND_PROMPT)
        await d.turns("ti", 2)

        assert read_lines(d.state_dir / "refunds.txt") == ["1042:249"]
        assert d.desk_log.count(tool_kind("issue_refund")) == 1
        # The tool ran up to interrupt(), then again from its start with the answer.
        assert d.desk_log.count(tool_kind("ask_customer")) == 2
        assert d.desk_log.keys(MODEL_KIND) == [
            "agent/0/0",
            "agent/0/1",
            "agent/0/1",
            "agent/0/2",
            "agent/1/0",
        ]
        await check_against_control(d, TOOL_INTERRUPT, "ti", tmp_path, tool_steps=4)


async def test_injected_state_runtime_and_command_tools_keep_their_state(tmp_path: Path) -> None:
    gate = "model-agent-1-0"
    async with shape_stack(tmp_path, STATE_TOOLS, [gate]) as d:
        worker = await d.stack.start_worker()
        await d.sessions.start_session("st", FIRST_PROMPT)
        [approval] = await d.interrupts("st", 1, InterruptKind.APPROVAL)
        assert approval.tool_name == "save_note"
        worker.kill()  # SIGKILL while the approval is pending
        worker = await d.stack.start_worker()
        assert await d.sessions.resolve_interrupt("st", approval.interrupt_id, True)
        await d.turns("st", 1)
        assert await d.sessions.send_user_message("st", SECOND_PROMPT)
        worker = await d.kill_at_gate(worker, gate)
        await d.turns("st", 2)

        assert read_lines(d.state_dir / "notes.txt") == ["prefers email"]
        assert d.desk_log.count(tool_kind("save_note")) == 1
        _, values = await check_against_control(
            d, STATE_TOOLS, "st", tmp_path, state_keys=["notes"], tool_steps=3
        )
        assert values["notes"] == ["prefers email"]


@pytest.mark.parametrize("shape", [HITL, HITL_PER_CALL])
async def test_human_in_the_loop_middleware_decisions_are_dex_approvals(
    tmp_path: Path, shape: str
) -> None:
    gate = "model-agent-1-0"
    async with shape_stack(tmp_path, shape, [gate]) as d:
        worker = await d.stack.start_worker()
        await d.sessions.start_session("hl", FIRST_PROMPT)
        pending = await d.interrupts("hl", 2, InterruptKind.APPROVAL)
        assert sorted(i.tool_name for i in pending) == ["add_note", "issue_refund"]
        worker.kill()  # SIGKILL while both approvals are pending
        worker = await d.stack.start_worker()
        by_tool = {i.tool_name: i for i in pending}
        assert await d.sessions.resolve_interrupt(
            "hl", by_tool["issue_refund"].interrupt_id, True, arguments=json.dumps(EDITED_REFUND)
        )
        assert await d.sessions.resolve_interrupt(
            "hl", by_tool["add_note"].interrupt_id, False, rejection_message=NOTE_REJECTION
        )
        await d.turns("hl", 1)
        assert await d.sessions.send_user_message("hl", SECOND_PROMPT)
        worker = await d.kill_at_gate(worker, gate)
        await d.turns("hl", 2)

        # The edited refund ran once with the edited amount; the rejected note never ran.
        assert read_lines(d.state_dir / "refunds.txt") == ["1042:100"]
        assert d.desk_log.count(tool_kind("issue_refund")) == 1
        assert d.desk_log.count(tool_kind("add_note")) == 0
        await check_against_control(d, shape, "hl", tmp_path, tool_steps=2)


@pytest.mark.parametrize("shape", [ROUTER, SUBGRAPH])
async def test_a_router_and_an_agent_node_each_make_their_own_model_steps(
    tmp_path: Path, shape: str
) -> None:
    # ROUTER: the agent node is a model node next to a ToolNode; SUBGRAPH: it is a
    # create_agent graph added as a node.
    gate = "model-billing-0-0"
    async with shape_stack(tmp_path, shape, [gate]) as d:
        worker = await d.stack.start_worker()
        await d.sessions.start_session("rt", FIRST_PROMPT)
        worker = await d.kill_at_gate(worker, gate)  # inside the second model node's call
        [approval] = await d.interrupts("rt", 1, InterruptKind.APPROVAL)
        assert approval.tool_name == "issue_refund"
        worker.kill()
        worker = await d.stack.start_worker()
        assert await d.sessions.resolve_interrupt("rt", approval.interrupt_id, True)
        await d.turns("rt", 1)
        assert await d.sessions.send_user_message("rt", SECOND_PROMPT)
        await d.turns("rt", 2)

        assert read_lines(d.state_dir / "refunds.txt") == ["1042:249"]
        # Only the killed billing call ran twice; triage never repeated.
        assert d.desk_log.keys(MODEL_KIND) == [
            "triage/0/0",
            "billing/0/0",
            "billing/0/0",
            "billing/0/1",
            "triage/1/0",
            "billing/1/0",
        ]
        await check_against_control(d, ROUTER, "rt", tmp_path, state_keys=["route"], tool_steps=2)


async def test_an_interrupt_in_a_graph_node_is_a_durable_question(tmp_path: Path) -> None:
    gate = "model-draft-1-0"
    async with shape_stack(tmp_path, NODE_INTERRUPT, [gate]) as d:
        worker = await d.stack.start_worker()
        await d.sessions.start_session("ni", FIRST_PROMPT)
        [question] = await d.interrupts("ni", 1, InterruptKind.QUESTION)
        snapshot = await d.sessions.get_agent_snapshot("ni")
        [record] = snapshot.tool_calls
        assert json.loads(record.arguments)["value"]["question"] == "Send this reply?"
        worker.kill()
        worker = await d.stack.start_worker()
        assert await d.sessions.resolve_interrupt(
            "ni", question.interrupt_id, True, answer=REVIEW_ANSWER
        )
        await d.turns("ni", 1)
        assert await d.sessions.send_user_message("ni", SECOND_PROMPT)
        worker = await d.kill_at_gate(worker, gate)
        [question] = await d.interrupts("ni", 1, InterruptKind.QUESTION)
        assert await d.sessions.resolve_interrupt(
            "ni", question.interrupt_id, True, answer=REVIEW_ANSWER
        )
        snapshot = await d.turns("ni", 2)

        assert snapshot.messages[-1].text.startswith("sent: ")
        assert d.desk_log.keys(MODEL_KIND) == ["draft/0/0", "draft/1/0", "draft/1/0"]
        await check_against_control(
            d, NODE_INTERRUPT, "ni", tmp_path, tool_steps=4, resumes_without_model=2
        )
