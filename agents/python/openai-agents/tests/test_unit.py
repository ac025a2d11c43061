"""Fast checks of the adapter's pieces, without a server."""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import replace
from typing import Any

import msgspec
import pytest
from agents import (
    Agent,
    FunctionTool,
    GuardrailFunctionOutput,
    RunConfig,
    RunContextWrapper,
    Runner,
    function_tool,
    handoff,
    output_guardrail,
)
from agents.tool_context import ToolContext
from dex_agents import (
    AgentEvent,
    AgentEventWriter,
    AgentMessage,
    AgentSessionOptions,
    AgentToolCall,
    AgentTurnContext,
    ContinueTurn,
    DeferredToolExecution,
    MessageRole,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolPolicy,
    TurnCompleted,
)
from mcp.types import ToolAnnotations

from dex_agents_openai_agents import (
    FakeModel,
    FakeModelRequest,
    FakeResponse,
    FakeToolCall,
    OpenAIAgentsRunner,
    SecondModelCallError,
    framework_effect,
)
from dex_agents_openai_agents._guard import CallBudget
from dex_agents_openai_agents._items import framework_messages, input_items
from dex_agents_openai_agents._policies import resolve_policy


@function_tool
def ping(host: str) -> str:
    """Ping a host."""
    return f"pong from {host}"


def annotated(**hints: bool) -> FunctionTool:
    async def invoke(_context: ToolContext[Any], _arguments: str) -> str:
        return "x"

    return FunctionTool(
        name="mcp_tool",
        description="from an MCP server",
        params_json_schema={"type": "object", "properties": {}},
        on_invoke_tool=invoke,
        _mcp_annotations=ToolAnnotations(**hints),  # type: ignore[arg-type]
    )


def turn(options: AgentSessionOptions, events: list[AgentEvent]) -> AgentTurnContext:
    async def heartbeat() -> None:
        return None

    writer = AgentEventWriter(events.append, turn_id="turn-1", step_execution_id="s", attempt=1)
    return AgentTurnContext(
        flow_id="f",
        turn_id="turn-1",
        attempt=1,
        messages=[],
        framework_run_state=None,
        tool_calls={},
        events=writer,
        heartbeat=heartbeat,
        options=options,
    )


def test_mcp_annotations_give_the_framework_effect() -> None:
    assert framework_effect(annotated(readOnlyHint=True)) is ToolEffect.READ
    assert framework_effect(annotated(idempotentHint=True)) is ToolEffect.IDEMPOTENT_WRITE
    assert framework_effect(annotated(destructiveHint=True)) is None
    assert framework_effect(ping) is None


async def test_needs_approval_adds_an_approval_and_a_function_may_waive_one() -> None:
    gated = copy.copy(ping)
    gated.needs_approval = True
    explicit = AgentSessionOptions(tool_policies={"ping": ToolPolicy(ToolEffect.READ)})
    policy = await resolve_policy(turn(explicit, []), gated, "ping", "{}", "c1", None)
    assert policy == ToolPolicy(ToolEffect.READ, requires_approval=True)

    async def remote_only(
        _ctx: RunContextWrapper[Any], arguments: dict[str, Any], _id: str
    ) -> bool:
        return str(arguments["host"]) != "localhost"

    decided = copy.copy(ping)
    decided.needs_approval = remote_only
    plain = AgentSessionOptions()  # unclassified: approval by default
    local = await resolve_policy(
        turn(plain, []), decided, "ping", '{"host":"localhost"}', "c", None
    )
    assert local == ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False)
    remote = await resolve_policy(turn(plain, []), decided, "ping", '{"host":"x"}', "c", None)
    assert remote == ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=True)
    # An explicit policy keeps its default approval unless it lets the framework waive it.
    strict = AgentSessionOptions(
        tool_policies={"ping": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
    )
    kept = await resolve_policy(
        turn(strict, []), decided, "ping", '{"host":"localhost"}', "c", None
    )
    assert kept == ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)
    # The SDK's default needs_approval=False decides nothing.
    default = await resolve_policy(turn(plain, []), ping, "ping", "{}", "c", None)
    assert default == ToolPolicy(ToolEffect.UNCLASSIFIED)


def test_a_second_model_call_in_one_step_fails() -> None:
    budget = CallBudget()
    budget.start()
    budget.start()  # a provider retry of an unfinished call is allowed
    budget.finish(None)
    with pytest.raises(SecondModelCallError):
        budget.start()


def test_handoffs_that_rewrite_the_conversation_are_refused() -> None:
    billing = Agent(name="billing")
    OpenAIAgentsRunner(Agent(name="triage", handoffs=[billing]))  # plain handoffs run
    filtered = handoff(billing, input_filter=lambda data: data)
    with pytest.raises(ValueError, match="input_filter or nest_handoff_history"):
        OpenAIAgentsRunner(Agent(name="triage", handoffs=[filtered]))
    with pytest.raises(ValueError, match="nest_handoff_history rewrite"):
        OpenAIAgentsRunner(
            Agent(name="triage", handoffs=[billing]),
            run_config=RunConfig(nest_handoff_history=True),
        )


def test_agents_and_tools_reachable_through_handoffs_need_distinct_names() -> None:
    twin = Agent(name="triage")
    with pytest.raises(ValueError, match="two different agents are named 'triage'"):
        OpenAIAgentsRunner(Agent(name="triage", handoffs=[twin]))
    other_ping = function_tool(lambda host: host, name_override="ping")
    billing = Agent(name="billing", tools=[other_ping])
    with pytest.raises(ValueError, match="two different tools are named 'ping'"):
        OpenAIAgentsRunner(Agent(name="triage", tools=[ping], handoffs=[billing]))
    shared = Agent(name="billing", tools=[ping])
    OpenAIAgentsRunner(Agent(name="triage", tools=[ping], handoffs=[shared]))


def test_roles_of_new_items() -> None:
    items: list[Any] = [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c", "name": "ping", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "pong"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}],
        },
    ]
    messages = framework_messages(items)
    assert [m.role for m in messages] == [
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    assert [m.text for m in messages] == ["hi", "ping({})", "pong", "ok"]
    assert [m.framework_item for m in messages] == items


async def test_the_fake_model_drives_the_real_sdk_with_parallel_calls() -> None:
    seen: list[FakeModelRequest] = []

    def script(request: FakeModelRequest) -> FakeResponse | str:
        seen.append(request)
        if request.call_index == 0:
            calls = [FakeToolCall(name="ping", arguments={"host": h}) for h in ("a", "b")]
            return FakeResponse(tool_calls=calls)
        return json.dumps(request.tool_outputs, sort_keys=True)

    agent = Agent(name="pinger", model=FakeModel(script), tools=[ping])
    result = await Runner.run(agent, "ping a and b")
    assert json.loads(result.final_output) == {
        "call_1_0_0": "pong from a",
        "call_1_0_1": "pong from b",
    }
    assert [(r.user_turn, r.call_index, r.user_text) for r in seen] == [
        (1, 0, "ping a and b"),
        (1, 1, "ping a and b"),
    ]


async def test_one_step_stops_before_tools_and_reports_usage() -> None:
    def script(request: FakeModelRequest) -> FakeResponse:
        return FakeResponse(text="checking", tool_calls=[FakeToolCall(name="ping")])

    runner = OpenAIAgentsRunner(Agent(name="pinger", model=FakeModel(script), tools=[ping]))
    events: list[AgentEvent] = []
    context = turn(AgentSessionOptions(), events)
    user = runner.build_user_message("ping")
    stored = AgentMessage(
        sequence=1, turn_id="turn-1", role=user.role, framework_item=user.framework_item
    )
    context = replace(context, messages=[stored])
    outcome = await runner.run_model_step(context)
    context.events.close()
    await asyncio.sleep(0)
    assert isinstance(outcome, ToolCallsRequested)
    assert [c.tool_call_id for c in outcome.tool_calls] == ["call_1_0_0"]
    assert outcome.tool_calls[0].policy == ToolPolicy(ToolEffect.UNCLASSIFIED)
    assert outcome.usage is not None and outcome.usage.requests == 1
    assert json.loads(outcome.framework_run_state)["$schemaVersion"]
    assert [e.data["text"] for e in events] == ["checking"]


class Desk:
    """An app context that is not JSON: rebuilt by the factory on every step."""

    def __init__(self) -> None:
        self.user = "ada"


@function_tool
def whoami(context: RunContextWrapper[Desk]) -> str:
    """Tell who is asking."""
    return f"asked by {context.context.user}"


async def test_the_context_factory_reaches_tools_and_resumed_steps() -> None:
    def script(request: FakeModelRequest) -> FakeResponse | str:
        if request.call_index == 0:
            return FakeResponse(tool_calls=[FakeToolCall(name="whoami")])
        return f"answer: {request.tool_outputs['call_1_0_0']}"

    agent = Agent[Desk](name="desk", model=FakeModel(script), tools=[whoami])
    runner = OpenAIAgentsRunner(agent, context_factory=Desk)
    options = AgentSessionOptions(tool_policies={"whoami": ToolPolicy(ToolEffect.READ)})
    context = turn(options, [])
    user = runner.build_user_message("who am I?")
    stored = AgentMessage(
        sequence=1, turn_id="turn-1", role=user.role, framework_item=user.framework_item
    )
    first = await runner.run_model_step(replace(context, messages=[stored]))
    assert isinstance(first, ToolCallsRequested)
    assert "ada" not in first.framework_run_state  # the context object is not stored

    call = first.tool_calls[0]
    record = AgentToolCall(
        tool_call_id=call.tool_call_id,
        turn_id="turn-1",
        tool_name=call.tool_name,
        arguments=call.arguments,
        effect=ToolEffect.READ,
        requires_approval=False,
        deferral_order=0,
        status=ToolCallStatus.APPROVED,
        idempotency_key="f/turn-1/call_1_0_0",
    )
    execution = DeferredToolExecution(
        flow_id="f",
        tool_call=record,
        idempotency_key=record.idempotency_key,
        attempt=1,
        events=context.events,
        heartbeat=context.heartbeat,
    )
    result = await runner.execute_deferred_tool_call(execution)
    assert result.output == "asked by ada"

    done = msgspec.structs.replace(record, status=ToolCallStatus.SUCCEEDED, output=result.output)
    resumed = replace(
        context,
        messages=[stored],
        framework_run_state=first.framework_run_state,
        tool_calls={done.tool_call_id: done},
    )
    final = await runner.run_model_step(resumed)
    assert isinstance(final, TurnCompleted)
    assert final.new_messages[-1].text == "answer: asked by ada"
    assert [m.role for m in final.new_messages] == [
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]


def handoff_agents(calls: list[str]) -> Agent[Any]:
    def triage(request: FakeModelRequest) -> FakeResponse:
        calls.append("triage")
        return FakeResponse(tool_calls=[FakeToolCall(name="transfer_to_billing")])

    def billing(request: FakeModelRequest) -> str:
        calls.append("billing")
        return f"billing answers turn {request.user_turn}"

    desk = Agent(name="billing", model=FakeModel(billing))
    return Agent(name="triage", model=FakeModel(triage), handoffs=[desk])


def stored(items: list[Any], turn_ids: list[str]) -> list[AgentMessage]:
    return [
        AgentMessage(sequence=n, turn_id=t, role=MessageRole.USER, framework_item=item)
        for n, (item, t) in enumerate(zip(items, turn_ids, strict=True), start=1)
    ]


@pytest.mark.parametrize(
    ("start_turns_with", "expected"),
    [("last_agent", ["billing"]), ("starting_agent", ["triage"])],
)
async def test_a_handoff_continues_the_turn_and_the_next_turn_starts_with_the_last_agent(
    start_turns_with: Any, expected: list[str]
) -> None:
    calls: list[str] = []
    runner = OpenAIAgentsRunner(handoff_agents(calls), start_turns_with=start_turns_with)
    base = turn(AgentSessionOptions(), [])
    first_user = runner.build_user_message("invoice?").framework_item
    context = replace(base, messages=stored([first_user], ["turn-1"]))
    handed = await runner.run_model_step(context)
    assert isinstance(handed, ContinueTurn) and handed.reason == "handoff"
    assert calls == ["triage"]  # stopped before the billing agent's call
    done = await runner.run_model_step(
        replace(context, framework_run_state=handed.framework_run_state)
    )
    assert isinstance(done, TurnCompleted)
    assert calls == ["triage", "billing"]
    assert done.new_messages[-1].text == "billing answers turn 1"

    calls.clear()
    items = [first_user, *(m.framework_item for m in done.new_messages)]
    items.append(runner.build_user_message("and now?").framework_item)
    turn_ids = ["turn-1"] * (len(items) - 1) + ["turn-2"]
    second = replace(base, turn_id="turn-2", messages=stored(items, turn_ids))
    outcome = await runner.run_model_step(second)
    assert calls == expected
    if start_turns_with == "last_agent":
        assert isinstance(outcome, TurnCompleted)
        assert outcome.new_messages[-1].text == "billing answers turn 2"
    else:
        assert isinstance(outcome, ContinueTurn)


async def test_an_output_guardrail_after_tools_keeps_a_note_of_the_calls_that_ran() -> None:
    def script(request: FakeModelRequest) -> FakeResponse | str:
        if request.call_index == 0:
            return FakeResponse(tool_calls=[FakeToolCall(name="ping", arguments={"host": "a"})])
        return "secret answer"

    @output_guardrail
    async def no_secrets(
        _ctx: RunContextWrapper[Any], _agent: Agent[Any], output: str
    ) -> GuardrailFunctionOutput:
        return GuardrailFunctionOutput(output_info="secret", tripwire_triggered="secret" in output)

    agent = Agent(name="pinger", model=FakeModel(script), tools=[ping])
    agent.output_guardrails = [no_secrets]
    runner = OpenAIAgentsRunner(agent)
    base = turn(AgentSessionOptions(), [])
    user = runner.build_user_message("ping a")
    context = replace(base, messages=stored([user.framework_item], ["turn-1"]))
    first = await runner.run_model_step(context)
    assert isinstance(first, ToolCallsRequested)
    record = AgentToolCall(
        tool_call_id="call_1_0_0",
        turn_id="turn-1",
        tool_name="ping",
        arguments='{"host":"a"}',
        effect=ToolEffect.UNCLASSIFIED,
        requires_approval=True,
        deferral_order=0,
        status=ToolCallStatus.SUCCEEDED,
        idempotency_key="f/turn-1/call_1_0_0",
        output="pong from a",
    )
    resumed = replace(
        context, framework_run_state=first.framework_run_state, tool_calls={"call_1_0_0": record}
    )
    done = await runner.run_model_step(resumed)
    assert isinstance(done, TurnCompleted)
    [note] = done.new_messages
    assert note.text.startswith("OutputGuardrailTripwireTriggered: the output guardrail")
    # The blocked answer is not stored, but the model later learns the ping ran.
    items = [user.framework_item, note.framework_item]
    later = input_items(stored(items, ["turn-1", "turn-1"]))
    assert later == [
        {
            "role": "user",
            "content": "[Dex] The previous turn failed after these tool calls ran:\n"
            '- ping {"host":"a"} -> succeeded: pong from a\n'
            "Do not repeat these tool calls unless the user asks again.",
        }
    ]


async def test_a_handoff_after_tool_calls_continues_from_the_resumed_state() -> None:
    calls: list[str] = []

    def triage(request: FakeModelRequest) -> FakeResponse:
        calls.append(f"triage-{request.call_index}")
        if request.call_index == 0:
            return FakeResponse(tool_calls=[FakeToolCall(name="ping", arguments={"host": "a"})])
        return FakeResponse(tool_calls=[FakeToolCall(name="transfer_to_billing")])

    def billing(request: FakeModelRequest) -> str:
        calls.append(f"billing-{request.call_index}")
        return "billing here"

    desk = Agent(name="billing", model=FakeModel(billing))
    runner = OpenAIAgentsRunner(
        Agent(name="triage", model=FakeModel(triage), tools=[ping], handoffs=[desk])
    )
    user = runner.build_user_message("hi")
    context = replace(
        turn(AgentSessionOptions(), []), messages=stored([user.framework_item], ["turn-1"])
    )
    first = await runner.run_model_step(context)
    assert isinstance(first, ToolCallsRequested)
    record = AgentToolCall(
        tool_call_id="call_1_0_0",
        turn_id="turn-1",
        tool_name="ping",
        arguments='{"host":"a"}',
        effect=ToolEffect.READ,
        requires_approval=False,
        deferral_order=0,
        status=ToolCallStatus.SUCCEEDED,
        idempotency_key="f/turn-1/call_1_0_0",
        output="pong from a",
    )
    resumed = replace(context, tool_calls={"call_1_0_0": record})
    handed = await runner.run_model_step(
        replace(resumed, framework_run_state=first.framework_run_state)
    )
    assert isinstance(handed, ContinueTurn) and handed.reason == "handoff"
    assert calls == ["triage-0", "triage-1"]
    done = await runner.run_model_step(
        replace(resumed, framework_run_state=handed.framework_run_state)
    )
    assert isinstance(done, TurnCompleted)
    assert calls == ["triage-0", "triage-1", "billing-2"]
    assert [m.text for m in done.new_messages] == [
        'ping({"host":"a"})',
        "pong from a",
        "transfer_to_billing({})",
        '{"assistant": "billing"}',
        "billing here",
    ]
