"""Runner behaviour that needs no server: one model call per step, invalid arguments."""

from __future__ import annotations

import json

import pytest
from dex_agents import (
    AgentEvent,
    AgentEventWriter,
    AgentMessage,
    AgentSessionOptions,
    AgentToolCall,
    AgentTurnContext,
    DeferredToolExecution,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    TurnCompleted,
)
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.toolsets import FunctionToolset

from dex_agents_pydantic_ai import (
    FakeModel,
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    MultipleModelCallsError,
    PydanticAIRunner,
)


def make_runner(first: list[FakeToolCall]) -> PydanticAIRunner[None]:
    def script(call: FakeModelCall) -> FakeReply | str:
        if call.call_index == 0:
            return FakeReply(tool_calls=first)
        return "seen: " + "; ".join(f"{p.tool_name}[{p.outcome}]" for p in call.tool_returns())

    agent = Agent(FakeModel(script), instructions="Count.")

    @agent.tool_plain
    def count(n: int) -> str:
        raise AssertionError("tools never run inside run_model_step")

    return PydanticAIRunner(agent)


def make_turn(
    runner: PydanticAIRunner[None],
    state: str | None = None,
    records: dict[str, AgentToolCall] | None = None,
) -> AgentTurnContext:
    user = runner.build_user_message("count")
    events: list[AgentEvent] = []

    async def heartbeat() -> None:
        return None

    return AgentTurnContext(
        flow_id="f",
        turn_id="turn-1",
        attempt=1,
        messages=[
            AgentMessage(
                sequence=1, turn_id="turn-1", role=user.role, framework_item=user.framework_item
            )
        ],
        framework_run_state=state,
        tool_calls=records or {},
        events=AgentEventWriter(
            events.append, turn_id="turn-1", step_execution_id="RunModel-1", attempt=1
        ),
        heartbeat=heartbeat,
        options=AgentSessionOptions(),
    )


async def test_a_second_model_call_in_one_step_fails_the_attempt() -> None:
    runner = make_runner([FakeToolCall(tool_name="count", arguments={"n": "not a number"})])
    with pytest.raises(MultipleModelCallsError):
        await runner.run_model_step(make_turn(runner))


async def test_invalid_calls_next_to_valid_ones_reach_the_model_on_resume() -> None:
    runner = make_runner(
        [
            FakeToolCall(tool_name="count", arguments={"n": "bad"}),
            FakeToolCall(tool_name="count", arguments={"n": 2}),
        ]
    )
    requested = await runner.run_model_step(make_turn(runner))
    assert isinstance(requested, ToolCallsRequested)
    assert [c.arguments for c in requested.tool_calls] == ['{"n":2}']
    assert requested.usage is not None and requested.usage.requests == 1
    call = requested.tool_calls[0]
    record = AgentToolCall(
        tool_call_id=call.tool_call_id,
        turn_id="turn-1",
        tool_name=call.tool_name,
        arguments=call.arguments,
        effect=ToolEffect.UNCLASSIFIED,
        requires_approval=True,
        deferral_order=0,
        status=ToolCallStatus.SUCCEEDED,
        idempotency_key="f/turn-1/" + call.tool_call_id,
        output="2",
    )
    completed = await runner.run_model_step(
        make_turn(runner, requested.framework_run_state, {call.tool_call_id: record})
    )
    assert isinstance(completed, TurnCompleted)
    assert completed.new_messages[-1].text == "seen: count[retried]; count[success]"
    assert len(completed.new_messages) == 4


def tool_record(name: str, arguments: str, *, requires_approval: bool) -> AgentToolCall:
    return AgentToolCall(
        tool_call_id="call-1",
        turn_id="turn-1",
        tool_name=name,
        arguments=arguments,
        effect=ToolEffect.IDEMPOTENT_WRITE,
        requires_approval=requires_approval,
        deferral_order=0,
        status=ToolCallStatus.APPROVED if requires_approval else ToolCallStatus.PENDING,
        idempotency_key="f/turn-1/call-1",
    )


def execution(record: AgentToolCall) -> DeferredToolExecution:
    async def heartbeat() -> None:
        return None

    return DeferredToolExecution(
        flow_id="f",
        tool_call=record,
        idempotency_key=record.idempotency_key,
        attempt=1,
        events=AgentEventWriter(lambda _: None, turn_id="turn-1", step_execution_id="s", attempt=1),
        heartbeat=heartbeat,
    )


def file_agent(written: list[str]) -> PydanticAIRunner[None]:
    agent: Agent[None, str] = Agent(FakeModel("unused"))

    @agent.tool(metadata={"dex_effect": "idempotent_write"})
    def write_file(ctx: RunContext[None], path: str, content: str) -> str:
        # The documented conditional approval: only .env needs a human.
        if path == ".env" and not ctx.tool_call_approved:
            raise ApprovalRequired()
        written.append(path)
        return f"wrote {path}"

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        written.append(f"deleted {path}")
        return "deleted"

    return PydanticAIRunner(agent)


async def test_a_tools_own_approval_request_is_never_dropped() -> None:
    written: list[str] = []
    runner = file_agent(written)
    env = tool_record("write_file", '{"path": ".env", "content": "KEY=1"}', requires_approval=False)
    with pytest.raises(ToolExecutionError, match="requires_approval=True"):
        await runner.execute_deferred_tool_call(execution(env))
    assert written == []

    # Approved by the session (a ToolPolicy requiring approval): the tool sees it.
    approved = tool_record("write_file", env.arguments or "", requires_approval=True)
    result = await runner.execute_deferred_tool_call(execution(approved))
    assert result.output == "wrote .env" and written == [".env"]

    # Calls the tool does not ask approval for run as before.
    readme = tool_record(
        "write_file", '{"path": "README", "content": "hi"}', requires_approval=False
    )
    assert (await runner.execute_deferred_tool_call(execution(readme))).output == "wrote README"


async def test_requires_approval_waived_by_an_explicit_policy_still_runs() -> None:
    written: list[str] = []
    runner = file_agent(written)
    record = tool_record("delete_file", '{"path": "tmp"}', requires_approval=False)
    assert (await runner.execute_deferred_tool_call(execution(record))).output == "deleted"
    assert written == ["deleted tmp"]


def test_an_approval_required_toolset_is_refused_at_registration() -> None:
    def wipe(path: str) -> str:
        """Wipe a path."""
        return path

    toolset = FunctionToolset([wipe]).approval_required(lambda ctx, tool_def, args: True)
    with pytest.raises(ValueError, match=r"requires_approval=True.*ToolPolicy"):
        PydanticAIRunner(Agent(FakeModel("unused"), toolsets=[toolset]))


async def test_a_run_state_of_the_first_format_still_resumes() -> None:
    runner = make_runner([FakeToolCall(tool_name="count", arguments={"n": 2})])
    requested = await runner.run_model_step(make_turn(runner))
    assert isinstance(requested, ToolCallsRequested)
    call = requested.tool_calls[0]
    record = AgentToolCall(
        tool_call_id=call.tool_call_id,
        turn_id="turn-1",
        tool_name=call.tool_name,
        arguments=call.arguments,
        effect=ToolEffect.UNCLASSIFIED,
        requires_approval=True,
        deferral_order=0,
        status=ToolCallStatus.SUCCEEDED,
        idempotency_key="f/turn-1/" + call.tool_call_id,
        output="2",
    )
    # Format 1 held the turn's messages after its request, not the request itself.
    state = json.loads(requested.framework_run_state)
    older = json.dumps({**state, "format": "dex-pydantic-ai/1", "messages": state["messages"][1:]})
    records = {call.tool_call_id: record}
    current = await runner.run_model_step(make_turn(runner, requested.framework_run_state, records))
    resumed = await runner.run_model_step(make_turn(runner, older, records))
    assert isinstance(current, TurnCompleted) and isinstance(resumed, TurnCompleted)
    assert [m.text for m in resumed.new_messages] == [m.text for m in current.new_messages]
    assert resumed.new_messages[-1].text == "seen: count[success]"
