"""The runner contract in one process: the session is played by hand, no server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dex_agents import (
    AgentEventType,
    MessageRole,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    TurnCompleted,
    current_tool_execution,
)
from dex_agents._runner import bind_tool_execution
from dex_agents.testing import MODEL_CALL_KIND, InvocationLog, tool_call_kind
from langchain.agents import create_agent
from langchain_core.messages import AIMessage
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition

from dex_agents_langgraph import (
    FakeReply,
    FakeToolCall,
    LangGraphRunner,
    RunStateError,
    ScriptedChatModel,
    TooManyModelCallsError,
)
from tests.agent_defs import build_agent
from tests.unit_helpers import Events, execution, record, stored, turn_context


def desk(tmp_path: Path) -> tuple[LangGraphRunner, InvocationLog]:
    return LangGraphRunner(build_agent(tmp_path)), InvocationLog(tmp_path / "calls.log")


async def test_a_tool_round_defers_every_call_and_resumes_from_records(tmp_path: Path) -> None:
    runner, log = desk(tmp_path)
    history = stored([runner.build_user_message("please do everything for order 7")])

    events = Events()
    first = await runner.run_model_step(turn_context(history, events=events))
    assert isinstance(first, ToolCallsRequested)
    assert [(c.tool_call_id, c.tool_name, c.policy.effect) for c in first.tool_calls] == [
        ("call_0_0_0", "lookup_order", ToolEffect.READ),
        ("call_0_0_1", "add_note", ToolEffect.IDEMPOTENT_WRITE),
        ("call_0_0_2", "issue_refund", ToolEffect.NON_IDEMPOTENT_WRITE),
    ]
    assert json.loads(first.tool_calls[2].arguments) == {"order_id": 7, "amount": 30}
    assert first.usage is not None and first.usage.requests == 1
    assert log.count(MODEL_CALL_KIND) == 1
    assert log.entries() == [e for e in log.entries() if e.kind == MODEL_CALL_KIND]
    texts = [e.data["text"] for e in await events.settle() if e.type is AgentEventType.TEXT_DELTA]
    assert "".join(texts) == "Let me handle all of it."

    # Run the two retryable tools the way the tool Steps do.
    read, note, refund = first.tool_calls
    records = [record(read, 0, ToolCallStatus.SUCCEEDED), record(note, 1, ToolCallStatus.SUCCEEDED)]
    outputs = [
        (await runner.execute_deferred_tool_call(execution(r, Events()))).output for r in records
    ]
    assert log.count(tool_call_kind("lookup_order")) == 1
    records = [
        record(read, 0, ToolCallStatus.SUCCEEDED, output=outputs[0]),
        record(note, 1, ToolCallStatus.SUCCEEDED, output=outputs[1]),
        record(refund, 2, ToolCallStatus.REJECTED, rejection_message="not today"),
    ]

    second = await runner.run_model_step(
        turn_context(history, events=Events(), state=first.framework_run_state, records=records)
    )
    assert isinstance(second, TurnCompleted)
    assert [m.role for m in second.new_messages] == [
        MessageRole.ASSISTANT,
        MessageRole.TOOL,
        MessageRole.TOOL,
        MessageRole.TOOL,
        MessageRole.ASSISTANT,
    ]
    assert second.new_messages[-1].text.split("\n")[2] == (
        "issue_refund#call_0_0_2: error: The user rejected this tool call: not today"
    )
    assert second.usage is not None and second.usage.requests == 1
    assert log.count(MODEL_CALL_KIND) == 2
    assert log.count(tool_call_kind("issue_refund")) == 0


async def test_the_run_state_does_not_grow_with_the_history(tmp_path: Path) -> None:
    runner, _ = desk(tmp_path)
    ask = runner.build_user_message("where is my order?")
    short = await runner.run_model_step(turn_context(stored([ask]), events=Events()))
    filler = [runner.build_user_message("x" * 2000) for _ in range(20)]
    long = await runner.run_model_step(turn_context(stored([*filler, ask]), events=Events()))
    assert isinstance(short, ToolCallsRequested)
    assert isinstance(long, ToolCallsRequested)
    assert len(long.framework_run_state) < len(short.framework_run_state) + 200


async def test_a_run_state_from_other_messages_is_refused(tmp_path: Path) -> None:
    runner, _ = desk(tmp_path)
    history = stored([runner.build_user_message("where is my order?")])
    first = await runner.run_model_step(turn_context(history, events=Events()))
    assert isinstance(first, ToolCallsRequested)
    other = stored([runner.build_user_message("hi"), runner.build_user_message("again")])
    with pytest.raises(RunStateError):
        await runner.run_model_step(
            turn_context(other, events=Events(), state=first.framework_run_state)
        )


async def test_tool_errors_the_model_should_see(tmp_path: Path) -> None:
    runner, _ = desk(tmp_path)
    history = stored([runner.build_user_message("where is my order?")])
    first = await runner.run_model_step(turn_context(history, events=Events()))
    assert isinstance(first, ToolCallsRequested)
    bad = record(first.tool_calls[0], 0, ToolCallStatus.APPROVED)
    bad_args = type(bad)(**{**_fields(bad), "arguments": '{"order_id": "seven"}'})
    with pytest.raises(ToolExecutionError, match="order_id"):
        await runner.execute_deferred_tool_call(execution(bad_args, Events()))
    unknown = type(bad)(**{**_fields(bad), "tool_name": "nope"})
    with pytest.raises(ToolExecutionError, match="no tool named 'nope'"):
        await runner.execute_deferred_tool_call(execution(unknown, Events()))


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__struct_fields__}


def two_call_graph(model: ScriptedChatModel) -> Any:
    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    async def agent(state: MessagesState) -> dict[str, list[AIMessage]]:
        draft = await model.ainvoke(state["messages"])
        final = await model.ainvoke([*state["messages"], draft])
        return {"messages": [final]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([ping]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph.compile()


async def test_a_node_calling_the_model_twice_fails_the_step(tmp_path: Path) -> None:
    calls: list[int] = []
    model = ScriptedChatModel(
        script=lambda call: FakeReply(text=f"call {call.call_index}"),
        on_call=lambda call: calls.append(call.call_index),
    )
    graph = two_call_graph(model)
    history = stored([LangGraphRunner(graph).build_user_message("hi")])
    with pytest.raises(TooManyModelCallsError):
        await LangGraphRunner(graph).run_model_step(turn_context(history, events=Events()))
    assert calls == [0]  # the second call was stopped before it reached the model
    allowed = LangGraphRunner(graph, max_model_calls_per_step=2)
    done = await allowed.run_model_step(turn_context(history, events=Events()))
    assert isinstance(done, TurnCompleted)
    assert [m.text for m in done.new_messages] == ["call 1"]
    assert done.usage is not None and done.usage.requests == 2


async def test_a_custom_graph_with_tools_condition_defers_and_resumes() -> None:
    def script(call: Any) -> FakeReply:
        if call.call_index == 0:
            return FakeReply(tool_calls=[FakeToolCall(name="ping", id="p1")])
        return FakeReply(text=f"got {call.tool_results[0].content}")

    model = ScriptedChatModel(script=script)

    @tool
    def ping() -> str:
        """Ping."""
        return "pong"

    async def agent(state: MessagesState) -> dict[str, list[Any]]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("agent", agent)
    graph.add_node("tools", ToolNode([ping]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    runner = LangGraphRunner(graph.compile())
    assert runner.tool_nodes == ["tools"]
    history = stored([runner.build_user_message("ping it")])
    first = await runner.run_model_step(turn_context(history, events=Events()))
    assert isinstance(first, ToolCallsRequested)
    call = first.tool_calls[0]
    assert call.policy.effect is ToolEffect.UNCLASSIFIED
    output = await runner.execute_deferred_tool_call(
        execution(record(call, 0, ToolCallStatus.APPROVED), Events())
    )
    assert output.output == "pong"
    final = record(call, 0, ToolCallStatus.SUCCEEDED, output=output.output)
    second = await runner.run_model_step(
        turn_context(history, events=Events(), state=first.framework_run_state, records=[final])
    )
    assert isinstance(second, TurnCompleted)
    assert second.new_messages[-1].text == "got pong"


def test_stored_messages_keep_their_ids_across_steps() -> None:
    runner = LangGraphRunner(two_call_graph(ScriptedChatModel(script=lambda call: "x")))
    item = runner.build_user_message("hi")
    assert item.role is MessageRole.USER
    assert item.framework_item["type"] == "human"
    assert item.framework_item["data"]["content"] == "hi"
    assert item.text == "hi"


async def test_a_return_direct_tool_ends_the_turn_without_a_model_call(tmp_path: Path) -> None:
    @tool(return_direct=True)
    def final_lookup() -> str:
        """Look up and answer directly."""
        return "direct answer"

    def script(call: Any) -> FakeReply:
        if call.call_index == 0:
            return FakeReply(tool_calls=[FakeToolCall(name="final_lookup", id="d1")])
        raise AssertionError("the model must not be called after a return_direct tool")

    runner = LangGraphRunner(create_agent(ScriptedChatModel(script=script), tools=[final_lookup]))
    history = stored([runner.build_user_message("go")])
    first = await runner.run_model_step(turn_context(history, events=Events()))
    assert isinstance(first, ToolCallsRequested)
    done = record(first.tool_calls[0], 0, ToolCallStatus.SUCCEEDED, output="direct answer")
    second = await runner.run_model_step(
        turn_context(history, events=Events(), state=first.framework_run_state, records=[done])
    )
    assert isinstance(second, TurnCompleted)
    assert second.usage is not None and second.usage.requests == 0
    assert [m.text for m in second.new_messages] == ["", "direct answer"]


async def test_a_sync_tool_reads_the_idempotency_key(tmp_path: Path) -> None:
    @tool
    def keyed() -> str:
        """Report the key."""
        execution = current_tool_execution()
        return execution.idempotency_key if execution is not None else "none"

    def script(call: Any) -> FakeReply:
        return FakeReply(tool_calls=[FakeToolCall(name="keyed", id="k1")])

    runner = LangGraphRunner(create_agent(ScriptedChatModel(script=script), tools=[keyed]))
    history = stored([runner.build_user_message("go")])
    first = await runner.run_model_step(turn_context(history, events=Events()))
    assert isinstance(first, ToolCallsRequested)
    call = execution(record(first.tool_calls[0], 0, ToolCallStatus.APPROVED), Events())
    with bind_tool_execution(call):
        result = await runner.execute_deferred_tool_call(call)
    assert result.output == "s1/turn-1/k1"
