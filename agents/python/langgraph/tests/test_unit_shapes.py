"""What the adapter refuses at registration, and how a question's answer reaches a tool."""

from __future__ import annotations

import dataclasses

import pytest
from dex_agents import (
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    ToolInputAnswer,
    ToolInputRequired,
)
from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.tools import tool
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt

from dex_agents_langgraph import (
    FakeReply,
    FakeToolCall,
    LangGraphRunner,
    ScriptedChatModel,
    with_effect,
)
from dex_agents_langgraph._interrupts import DECLINED_ERROR
from tests.unit_helpers import Events, execution, record, stored, turn_context


@tool
def lookup(order_id: int) -> str:
    """Look up an order."""
    return f"order {order_id}"


@tool
def ask(question: str) -> str:
    """Ask the customer."""
    answer = interrupt({"question": question})
    return f"answer: {answer['text']}"


def test_two_human_in_the_loop_middlewares_are_refused_naming_one() -> None:
    class SecondReview(HumanInTheLoopMiddleware):
        """A second review step (its node name is the class name)."""

    first = HumanInTheLoopMiddleware(interrupt_on={"lookup": True})
    second = SecondReview(interrupt_on={"lookup": True})
    agent = create_agent(
        ScriptedChatModel(script=lambda c: "hi"), tools=[lookup], middleware=[first, second]
    )
    with pytest.raises(ValueError, match="use one middleware with every tool in its interrupt_on"):
        LangGraphRunner(agent)


def test_an_agent_nested_two_levels_deep_is_refused_naming_the_flat_graph() -> None:
    inner = create_agent(ScriptedChatModel(script=lambda c: "hi"), tools=[lookup])
    middle = StateGraph(MessagesState)
    middle.add_node("support", inner)
    middle.add_edge(START, "support")
    outer = StateGraph(MessagesState)
    outer.add_node("desk", middle.compile())
    outer.add_edge(START, "desk")
    with pytest.raises(ValueError, match="add 'support' to the outer graph itself"):
        LangGraphRunner(outer.compile())


async def test_a_question_asked_inside_a_tool_resumes_with_the_answer() -> None:
    with_effect(ask, ToolEffect.READ)
    model = ScriptedChatModel(
        script=lambda c: FakeReply(tool_calls=[FakeToolCall(name="ask", args={"question": "Why?"})])
    )
    runner = LangGraphRunner(create_agent(model, tools=[ask]))
    events = Events()
    history = stored([runner.build_user_message("hi")])
    outcome = await runner.run_model_step(turn_context(history, events=events))
    assert isinstance(outcome, ToolCallsRequested)
    [call] = outcome.tool_calls
    pending = record(call, 0, ToolCallStatus.PENDING)
    first = dataclasses.replace(
        execution(pending, events), framework_run_state=outcome.framework_run_state
    )
    with pytest.raises(ToolInputRequired) as asked:
        await runner.execute_deferred_tool_call(first)
    assert asked.value.question.message == "Why?"
    assert asked.value.question.key == "interrupt-1"

    answered = dataclasses.replace(
        first,
        answers=(ToolInputAnswer(key="interrupt-1", action="accept", content={"text": "because"}),),
    )
    result = await runner.execute_deferred_tool_call(answered)
    assert result.output == "answer: because"

    declined = dataclasses.replace(
        first, answers=(ToolInputAnswer(key="interrupt-1", action="decline"),)
    )
    with pytest.raises(ToolExecutionError, match=DECLINED_ERROR):
        await runner.execute_deferred_tool_call(declined)
