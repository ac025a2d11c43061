"""The support-desk agent of the integration tests, built with the real LangGraph/LangChain.

A Worker child learns what to serve from its environment: ``LG_TEST_SCENARIOS`` (comma
separated scenario names) and ``LG_TEST_STATE_DIR`` (gates and the invocation log).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dex_agents import AgentSessionFlow, AgentSessionOptions, current_tool_execution
from dex_agents.testing import MODEL_CALL_KIND, FileGate, InvocationLog, tool_call_kind
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool

from dex_agents_langgraph import (
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    LangGraphRunner,
    ScriptedChatModel,
)

SCENARIOS_ENV = "LG_TEST_SCENARIOS"
STATE_DIR_ENV = "LG_TEST_STATE_DIR"
SYSTEM_PROMPT = "You are a support agent for an online shop."

# Gated scenarios pause at these FileGates: each tool (by name) and each model call
# (``model-<turn index>-<call index>``).
GATED = {"gated"}


def _key() -> str:
    execution = current_tool_execution()
    return execution.idempotency_key if execution is not None else "outside-a-step"


def build_tools(state_dir: Path, gated: bool) -> list[BaseTool]:
    log = InvocationLog(state_dir / "calls.log")

    async def gate(name: str) -> None:
        if gated:
            await FileGate(state_dir, name).pass_through()

    @tool
    async def lookup_order(order_id: int) -> str:
        """Look up an order by its number."""
        log.record(tool_call_kind("lookup_order"), _key())
        await gate("lookup_order")
        return json.dumps({"order_id": order_id, "status": "shipped", "total": 42})

    @tool
    async def add_note(order_id: int, note: str) -> str:
        """Add a note to an order's ticket (stored once per idempotency key)."""
        key = _key()
        log.record(tool_call_kind("add_note"), key)
        await gate("add_note")
        return f"note added to order {order_id} with key {key}"

    @tool
    async def issue_refund(order_id: int, amount: int) -> str:
        """Refund an amount on an order (needs a person's approval)."""
        log.record(tool_call_kind("issue_refund"), _key())
        await gate("issue_refund")
        return f"refunded {amount} on order {order_id}"

    # MCP-style annotations, as langchain-mcp-adapters puts them in a tool's metadata.
    lookup_order.metadata = {"readOnlyHint": True}
    add_note.metadata = {"idempotentHint": True}
    issue_refund.metadata = {"readOnlyHint": False, "destructiveHint": True}
    return [lookup_order, add_note, issue_refund]


def summarize(call: FakeModelCall) -> str:
    """The answer after tool calls: one line per result with its status and content."""
    return "\n".join(
        f"{m.name}#{m.tool_call_id}: {m.status}: {m.content}" for m in call.tool_results
    )


def route(call: FakeModelCall) -> FakeReply:
    text = call.user_text.lower()
    if "everything" in text:
        calls = [
            FakeToolCall(name="lookup_order", args={"order_id": 7}),
            FakeToolCall(name="add_note", args={"order_id": 7, "note": "customer called"}),
            FakeToolCall(name="issue_refund", args={"order_id": 7, "amount": 30}),
        ]
        return FakeReply(text="Let me handle all of it.", tool_calls=calls)
    if "refund" in text:
        calls = [FakeToolCall(name="issue_refund", args={"order_id": 7, "amount": 30})]
        return FakeReply(text="I will ask for the refund.", tool_calls=calls)
    if "order" in text:
        calls = [FakeToolCall(name="lookup_order", args={"order_id": 7})]
        return FakeReply(
            text="Let me check.", reasoning="The user wants order 7.", tool_calls=calls
        )
    if "earlier" in text:
        return FakeReply(text=recall(call))
    return FakeReply(text=f"echo: {call.user_text}", reasoning="Nothing to look up.")


def recall(call: FakeModelCall) -> str:
    """What a later turn saw of earlier ones: the earlier answers and tool results."""
    answers = [
        str(m.text) for m in call.messages[:-1] if isinstance(m, AIMessage) and not m.tool_calls
    ]
    tools = [m.name for m in call.messages if isinstance(m, ToolMessage)]
    return f"I saw {len(call.messages)} messages; tools {tools}; answers {answers}"


def build_model(state_dir: Path, gated: bool) -> ScriptedChatModel:
    log = InvocationLog(state_dir / "calls.log")

    def on_call(call: FakeModelCall) -> None:
        log.record(MODEL_CALL_KIND, f"{call.turn_index}/{call.call_index}")

    async def script(call: FakeModelCall) -> FakeReply | str:
        if gated:
            await FileGate(state_dir, f"model-{call.turn_index}-{call.call_index}").pass_through()
        return route(call) if call.call_index == 0 else summarize(call)

    return ScriptedChatModel(script=script, on_call=on_call)


def live_model() -> Any:
    """A real OpenAI chat model (model name from ``OPENAI_MODEL``, default gpt-4o-mini)."""
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), temperature=0)


def build_agent(state_dir: Path, gated: bool = False, live: bool = False) -> Any:
    """The user's agent: ``create_agent`` with the support-desk tools, unchanged."""
    return create_agent(
        live_model() if live else build_model(state_dir, gated),
        tools=build_tools(state_dir, gated),
        system_prompt=SYSTEM_PROMPT,
    )


def flow_type(scenario: str) -> str:
    return "LangGraph" + "".join(part.title() for part in scenario.split("_"))


def build_flow(scenario: str, state_dir: Path) -> AgentSessionFlow:
    """The scenario's Flow; the same in the test process and the Worker child."""
    agent = build_agent(state_dir, gated=scenario in GATED, live=scenario == "live")
    runner = LangGraphRunner(agent)
    return AgentSessionFlow(runner, flow_type=flow_type(scenario), options=AgentSessionOptions())


def flows_from_env() -> list[AgentSessionFlow]:
    state_dir = Path(os.environ[STATE_DIR_ENV])
    names = [name for name in os.environ[SCENARIOS_ENV].split(",") if name]
    return [build_flow(name, state_dir) for name in names]
