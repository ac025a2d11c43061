"""Runner behaviour that needs no server: one model call per step, retries, approvals."""

from __future__ import annotations

import json
from typing import Any

import pytest
from dex_agents import (
    AgentEvent,
    AgentEventWriter,
    AgentMessage,
    AgentSessionOptions,
    AgentToolCall,
    AgentTurnContext,
    ContinueTurn,
    DeferredToolExecution,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    ToolPolicy,
    TurnCompleted,
    is_approval_required,
)
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ApprovalRequired, UnexpectedModelBehavior
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import FunctionToolset

from dex_agents_pydantic_ai import (
    VALIDATION_RETRY,
    FakeModel,
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    PydanticAIRunner,
)
from dex_agents_pydantic_ai._items import RunState


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
    options: AgentSessionOptions | None = None,
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
        options=options or AgentSessionOptions(),
    )


def retry_runner(bad_calls: int) -> PydanticAIRunner[None]:
    """The model sends invalid arguments on its first ``bad_calls`` calls, then valid ones."""

    def script(call: FakeModelCall) -> FakeReply | str:
        if call.call_index < bad_calls:
            return FakeReply(tool_calls=[FakeToolCall(tool_name="count", arguments={"n": "x"})])
        if call.call_index == bad_calls:
            return FakeReply(tool_calls=[FakeToolCall(tool_name="count", arguments={"n": 2})])
        return "done"

    agent = Agent(FakeModel(script))

    @agent.tool_plain
    def count(n: int) -> str:
        raise AssertionError("tools never run inside run_model_step")

    return PydanticAIRunner(agent)


async def test_a_retry_request_continues_the_turn_in_the_next_step() -> None:
    runner = retry_runner(bad_calls=1)
    continued = await runner.run_model_step(make_turn(runner))
    assert isinstance(continued, ContinueTurn)
    assert continued.reason == VALIDATION_RETRY
    assert continued.usage is not None and continued.usage.requests == 1
    state = RunState.load(continued.framework_run_state)
    assert state.deferred == [] and state.tool_retries == {"count": 1}
    retry = state.messages[-1]
    assert [getattr(part, "outcome", None) for part in retry.parts] == ["retried"]

    # The next step makes the corrected call; the tool is deferred as usual.
    requested = await runner.run_model_step(make_turn(runner, continued.framework_run_state))
    assert isinstance(requested, ToolCallsRequested)
    assert [c.arguments for c in requested.tool_calls] == ['{"n":2}']
    assert RunState.load(requested.framework_run_state).tool_retries == {}


async def test_a_tools_retry_budget_holds_across_steps() -> None:
    # max_retries is 1: the plain run fails on the second invalid call, and so does this.
    runner = retry_runner(bad_calls=2)
    plain = runner.agent
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        await plain.run("count")
    continued = await runner.run_model_step(make_turn(runner))
    assert isinstance(continued, ContinueTurn)
    with pytest.raises(UnexpectedModelBehavior, match="exceeded max retries"):
        await runner.run_model_step(make_turn(runner, continued.framework_run_state))


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


async def test_requires_approval_is_never_waived_by_an_explicit_policy() -> None:
    def script(call: FakeModelCall) -> FakeReply | str:
        return FakeReply(
            tool_calls=[FakeToolCall(tool_name="delete_file", arguments={"path": "t"})]
        )

    agent = Agent(FakeModel(script))

    @agent.tool_plain(requires_approval=True)
    def delete_file(path: str) -> str:
        return "deleted"

    runner = PydanticAIRunner(agent)
    options = AgentSessionOptions(
        tool_policies={"delete_file": ToolPolicy(ToolEffect.READ, requires_approval=False)}
    )
    requested = await runner.run_model_step(make_turn(runner, options=options))
    assert isinstance(requested, ToolCallsRequested)
    assert is_approval_required(requested.tool_calls[0].policy)


def approval_toolset_runner(
    decided: list[dict[str, Any]],
) -> PydanticAIRunner[None]:
    def script(call: FakeModelCall) -> FakeReply | str:
        return FakeReply(
            tool_calls=[
                FakeToolCall(tool_name="wipe", arguments={"path": "/tmp/x"}, tool_call_id="a"),
                FakeToolCall(tool_name="wipe", arguments={"path": "/etc"}, tool_call_id="b"),
                FakeToolCall(tool_name="look", arguments={"path": "/etc"}, tool_call_id="c"),
            ]
        )

    def wipe(path: str) -> str:
        """Wipe a path."""
        return f"wiped {path}"

    def look(path: str) -> str:
        """Look at a path."""
        return f"saw {path}"

    def outside_tmp(ctx: RunContext[Any], tool_def: ToolDefinition, args: dict[str, Any]) -> bool:
        decided.append(args)
        return not str(args["path"]).startswith("/tmp/")

    toolset = FunctionToolset([wipe]).approval_required(outside_tmp)
    return PydanticAIRunner(Agent(FakeModel(script), toolsets=[toolset, FunctionToolset([look])]))


async def test_an_approval_toolsets_function_decides_each_call_when_deferred() -> None:
    decided: list[dict[str, Any]] = []
    runner = approval_toolset_runner(decided)
    requested = await runner.run_model_step(make_turn(runner))
    assert isinstance(requested, ToolCallsRequested)
    needs = {c.tool_call_id: is_approval_required(c.policy) for c in requested.tool_calls}
    # No explicit policy: the function's False waives the unclassified default; a tool
    # outside the toolset keeps the default.
    assert needs == {"a": False, "b": True, "c": True}
    assert decided == [{"path": "/tmp/x"}, {"path": "/etc"}]

    # An explicit policy without the opt-in keeps its default approval for "a".
    strict = AgentSessionOptions(
        tool_policies={"wipe": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
    )
    requested = await runner.run_model_step(make_turn(runner, options=strict))
    assert isinstance(requested, ToolCallsRequested)
    assert all(is_approval_required(c.policy) for c in requested.tool_calls)
    waivable = AgentSessionOptions(
        tool_policies={
            "wipe": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, framework_may_waive_approval=True)
        }
    )
    requested = await runner.run_model_step(make_turn(runner, options=waivable))
    assert isinstance(requested, ToolCallsRequested)
    needs = {c.tool_call_id: is_approval_required(c.policy) for c in requested.tool_calls}
    assert needs == {"a": False, "b": True, "c": True}


async def test_an_approval_toolsets_tool_runs_once_approved_or_waived() -> None:
    runner = approval_toolset_runner([])
    waived = tool_record("wipe", '{"path": "/tmp/x"}', requires_approval=False)
    assert (await runner.execute_deferred_tool_call(execution(waived))).output == "wiped /tmp/x"
    approved = tool_record("wipe", '{"path": "/etc"}', requires_approval=True)
    assert (await runner.execute_deferred_tool_call(execution(approved))).output == "wiped /etc"
    # A call the function asks approval for never runs without one.
    unapproved = tool_record("wipe", '{"path": "/etc"}', requires_approval=False)
    with pytest.raises(ToolExecutionError, match="raised ApprovalRequired"):
        await runner.execute_deferred_tool_call(execution(unapproved))


def test_an_approval_toolset_inside_a_renaming_toolset_is_refused_at_registration() -> None:
    def wipe(path: str) -> str:
        """Wipe a path."""
        return path

    inner = FunctionToolset([wipe]).approval_required(lambda ctx, tool_def, args: True)
    with pytest.raises(ValueError, match=r"PrefixedToolset.*approval_required\(...\) outside"):
        PydanticAIRunner(Agent(FakeModel("unused"), toolsets=[inner.prefixed("fs")]))
    # Outside the prefix it is supported.
    outer = FunctionToolset([wipe]).prefixed("fs").approval_required(lambda c, d, a: True)
    PydanticAIRunner(Agent(FakeModel("unused"), toolsets=[outer]))


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
