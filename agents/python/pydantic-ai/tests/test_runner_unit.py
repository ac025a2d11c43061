"""Runner behaviour that needs no server: one model call per step, invalid arguments."""

from __future__ import annotations

import pytest
from dex_agents import (
    AgentEvent,
    AgentEventWriter,
    AgentMessage,
    AgentSessionOptions,
    AgentToolCall,
    AgentTurnContext,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    TurnCompleted,
)
from pydantic_ai import Agent

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
