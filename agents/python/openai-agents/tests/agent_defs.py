"""The support-desk agent of the tests, built with the real OpenAI Agents SDK.

The same code builds the Flow in the test process and in the Worker children; a Worker
learns its scenario from ``AGENT_TEST_SCENARIO`` and its gates and invocation log from
``AGENT_TEST_STATE_DIR``. Only the model is fake (:class:`FakeModel`, no network).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from agents import Agent, FunctionTool, Model, function_tool
from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolExecutionError,
    ToolPolicy,
    current_tool_execution,
)
from dex_agents.testing import FileGate, InvocationLog

from dex_agents_openai_agents import (
    FakeModel,
    FakeModelRequest,
    FakeResponse,
    FakeToolCall,
    OpenAIAgentsRunner,
)

SCENARIO_ENV = "AGENT_TEST_SCENARIO"
STATE_DIR_ENV = "AGENT_TEST_STATE_DIR"
MODEL_KIND = "model"
INSTRUCTIONS = "You are a support-desk agent. Use the tools to help with orders."

# Which gates each scenario passes: tool names, and model calls as "model-<turn>-<call>".
GATES: dict[str, set[str]] = {
    "desk": set(),
    "crash": {"lookup_order", "add_note", "issue_refund", "model-1-1"},
}

POLICIES = {
    "lookup_order": ToolPolicy(ToolEffect.READ),
    "add_note": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
    "issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),  # needs approval
    "check_stock": ToolPolicy(ToolEffect.READ),
    "track_parcel": ToolPolicy(ToolEffect.READ),
}


def tool_kind(name: str) -> str:
    return f"tool:{name}"


def model_key(request: FakeModelRequest) -> str:
    return f"{request.user_turn}/{request.call_index}"


def build_tools(state_dir: Path, gates: set[str]) -> list[FunctionTool]:
    """The three support-desk tools, plus three that fail; each call is logged."""
    log = InvocationLog(state_dir / "calls.log")

    async def enter(name: str) -> str:
        execution = current_tool_execution()
        key = execution.idempotency_key if execution is not None else "none"
        log.record(tool_kind(name), key)
        if name in gates:
            await FileGate(state_dir, name).pass_through()
        return key

    @function_tool
    async def lookup_order(order_id: int) -> dict[str, Any]:
        """Look up an order by its number."""
        await enter("lookup_order")
        return {"order_id": order_id, "status": "shipped", "total": 42}

    # failure_error_function=None: an exception fails the Step, so the effect's retries apply.
    @function_tool(failure_error_function=None)
    async def add_note(order_id: int, note: str) -> str:
        """Add a note to an order's ticket (stored once per idempotency key)."""
        key = await enter("add_note")
        if note == "explode":
            raise RuntimeError("the ticket service is down")
        return f"note added to order {order_id} with key {key}"

    @function_tool
    async def issue_refund(order_id: int, amount: int) -> str:
        """Refund an amount on an order."""
        await enter("issue_refund")
        return f"refunded {amount} on order {order_id}"

    @function_tool
    async def check_stock(item: str) -> str:
        """Check the stock of an item."""
        await enter("check_stock")
        raise ToolExecutionError(f"the inventory service does not know {item!r}")

    @function_tool
    async def track_parcel(order_id: int) -> str:
        """Track the parcel of an order (the SDK's default error handling)."""
        await enter("track_parcel")
        raise RuntimeError(f"the carrier does not answer for order {order_id}")

    return [lookup_order, add_note, issue_refund, check_stock, track_parcel]


def route(request: FakeModelRequest) -> FakeResponse | str:
    """The fake model: tools on a turn's first call, a summary of the results after."""
    if request.call_index > 0:
        lines = [
            f"{name}: {request.tool_outputs[call_id]}"
            for call_id, name in _call_names(request).items()
            if call_id in request.tool_outputs
        ]
        return "\n".join(lines)
    text = request.user_text.lower()
    calls: list[FakeToolCall] = []
    if "remember" in text:
        earlier = [item for item in request.input if item.get("type") == "function_call_output"]
        return f"earlier tool outputs: {[item['output'] for item in earlier]}"
    if "order" in text:
        calls.append(FakeToolCall(name="lookup_order", arguments={"order_id": 7}))
    if "note" in text:
        note = "explode" if "explode" in text else "customer called"
        calls.append(FakeToolCall(name="add_note", arguments={"order_id": 7, "note": note}))
    if "refund" in text:
        calls.append(FakeToolCall(name="issue_refund", arguments={"order_id": 7, "amount": 30}))
    if "track" in text:
        calls.append(FakeToolCall(name="track_parcel", arguments={"order_id": 7}))
    if "stock" in text:
        calls.append(FakeToolCall(name="check_stock", arguments={"item": "kettle"}))
    if not calls:
        return f"echo: {request.user_text}"
    return FakeResponse(text="Let me check.", reasoning="The user needs tools.", tool_calls=calls)


def _call_names(request: FakeModelRequest) -> dict[str, str]:
    return {
        str(item["call_id"]): str(item["name"])
        for item in request.input
        if item.get("type") == "function_call"
    }


def build_model(state_dir: Path, gates: set[str]) -> Model:
    log = InvocationLog(state_dir / "calls.log")

    async def on_call(request: FakeModelRequest) -> None:
        log.record(MODEL_KIND, model_key(request))
        gate = f"model-{request.user_turn}-{request.call_index}"
        if gate in gates:
            await FileGate(state_dir, gate).pass_through()

    return FakeModel(route, on_call=on_call)


def build_agent(state_dir: Path, scenario: str) -> Agent[Any]:
    """The user's agent: nothing in it knows about Dex."""
    gates = GATES[scenario]
    return Agent(
        name="support-desk",
        instructions=INSTRUCTIONS,
        model=build_model(state_dir, gates),
        tools=list(build_tools(state_dir, gates)),
    )


def flow_type(scenario: str) -> str:
    return "OpenAIDesk" + scenario.title()


def build_flow(scenario: str, state_dir: Path) -> AgentSessionFlow:
    runner = OpenAIAgentsRunner(build_agent(state_dir, scenario))
    options = AgentSessionOptions(tool_policies=POLICIES)
    return AgentSessionFlow(runner, flow_type=flow_type(scenario), options=options)


def flow_from_env() -> AgentSessionFlow:
    return build_flow(os.environ[SCENARIO_ENV], Path(os.environ[STATE_DIR_ENV]))


def arguments(**values: object) -> str:
    return json.dumps(values, separators=(",", ":"))
