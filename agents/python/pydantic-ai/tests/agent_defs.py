"""The support-desk agent of the tests, built with the real Pydantic AI ``Agent``.

Tests and Worker children build the same Flow: ``build_flow(scenario, state_dir)``. A
Worker child reads both from its environment (``flow_from_env``). Every real tool call
and model call is recorded in ``<state_dir>/calls.log``; ``FileGate`` s named by the
scenario pause a call so a test can SIGKILL the Worker at that exact point.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
    current_tool_execution,
)
from dex_agents.testing import FileGate, InvocationLog
from pydantic_ai import Agent
from pydantic_ai.exceptions import ToolFailed

from dex_agents_pydantic_ai import (
    FakeModel,
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    PydanticAIRunner,
)

SCENARIO_ENV = "PYDANTIC_AI_TEST_SCENARIO"
STATE_DIR_ENV = "PYDANTIC_AI_TEST_STATE_DIR"
MODEL_KIND = "model"
CRASH_AMOUNT = 999

ORDERS = {1042: {"order_id": 1042, "item": "espresso machine", "total": 249}}

# Scenarios: which gates exist and how issue_refund is governed.
GATED_TOOLS = {"crash_tools": ("lookup_order", "add_note", "issue_refund")}
MODEL_GATES = {"crash_model": "model-turn-1-call-0"}
NO_APPROVAL_SCENARIOS = {"parallel", "crash_tools", "crash_model", "multi_turn"}


def tool_kind(name: str) -> str:
    return f"tool:{name}"


class SupportDesk:
    """Tools and model script of one scenario; everything it records goes to state_dir."""

    def __init__(self, scenario: str, state_dir: Path) -> None:
        self.scenario = scenario
        self.state_dir = state_dir
        self.log = InvocationLog(state_dir / "calls.log")

    async def _enter_tool(self, name: str) -> str:
        execution = current_tool_execution()
        assert execution is not None, "tools run only inside a tool Step"
        self.log.record(tool_kind(name), execution.idempotency_key, f"attempt={execution.attempt}")
        if name in GATED_TOOLS.get(self.scenario, ()):
            await FileGate(self.state_dir, f"tool-{name}").pass_through()
        return execution.idempotency_key

    def notes(self) -> dict[str, object]:
        path = self.state_dir / "ticket-notes.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}

    # ------------------------------------------------------------------ tools

    async def lookup_order(self, order_id: int) -> dict[str, object]:
        """Look an order up by its number."""
        await self._enter_tool("lookup_order")
        order = ORDERS.get(order_id)
        if order is None:
            raise ToolFailed(f"no order {order_id}")
        return order

    async def add_note(self, order_id: int, note: str) -> str:
        """Add a note to the order's ticket (stored once per idempotency key)."""
        key = await self._enter_tool("add_note")
        notes = self.notes()
        notes[key] = {"order_id": order_id, "note": note}
        (self.state_dir / "ticket-notes.json").write_text(json.dumps(notes))
        return f"note stored on order {order_id}"

    async def issue_refund(self, order_id: int, amount: int) -> str:
        """Refund an amount on an order."""
        await self._enter_tool("issue_refund")
        if amount == CRASH_AMOUNT:
            raise RuntimeError("the payment service closed the connection")
        return f"refund of ${amount} issued for order {order_id}"

    # ------------------------------------------------------------------ model

    async def on_model_call(self, call: FakeModelCall) -> None:
        key = f"turn-{call.turn_number}/call-{call.call_index}"
        self.log.record(MODEL_KIND, key)
        gate = MODEL_GATES.get(self.scenario)
        if gate == f"model-turn-{call.turn_number}-call-{call.call_index}":
            await FileGate(self.state_dir, gate).pass_through()

    def script(self, call: FakeModelCall) -> FakeReply | str:
        text = call.user_text
        if call.call_index == 0 and "hello" in text:
            return FakeReply(text="Hello! How can I help?", thinking="A greeting.")
        if call.call_index == 0 and "remember" in text:
            seen = call.saw_text("espresso machine")
            count = len(call.messages)
            return f"Earlier you asked about the espresso machine: {seen} ({count} messages)."
        if call.call_index == 0:
            amount = CRASH_AMOUNT if "crash" in text else 249
            return FakeReply(
                text="Let me handle that.",
                thinking="Look up, note and refund in parallel.",
                tool_calls=[
                    FakeToolCall(tool_name="lookup_order", arguments={"order_id": 1042}),
                    FakeToolCall(
                        tool_name="add_note",
                        arguments={"order_id": 1042, "note": "arrived broken"},
                    ),
                    FakeToolCall(
                        tool_name="issue_refund", arguments={"order_id": 1042, "amount": amount}
                    ),
                ],
            )
        results = "; ".join(
            f"{part.tool_name}[{part.outcome}]={part.model_response_str(wrap_if_error=False)}"
            for part in call.tool_returns()
        )
        return f"Done. The order is an espresso machine. Results: {results}"

    # ------------------------------------------------------------------ agent

    def agent(self) -> Agent[None, str]:
        agent = Agent(
            FakeModel(self.script, on_call=self.on_model_call),
            instructions="You are a support-desk agent. Use the tools.",
        )
        agent.tool_plain(metadata={"annotations": {"readOnlyHint": True}})(self.lookup_order)
        agent.tool_plain(metadata={"dex_effect": "idempotent_write"})(self.add_note)
        # Pydantic AI's requires_approval=True always asks for a person; the scenarios that
        # run the refund without approval declare it plainly (their ToolPolicy says so).
        declared = self.scenario not in NO_APPROVAL_SCENARIOS
        agent.tool_plain(requires_approval=declared)(self.issue_refund)
        return agent


def flow_type(scenario: str) -> str:
    return "PydanticAiDesk" + "".join(word.title() for word in scenario.split("_"))


def build_flow(scenario: str, state_dir: Path) -> AgentSessionFlow:
    desk = SupportDesk(scenario, state_dir)
    policies: dict[str, ToolPolicy] = {}
    if scenario in NO_APPROVAL_SCENARIOS:
        policies["issue_refund"] = ToolPolicy(
            ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False
        )
    return AgentSessionFlow(
        PydanticAIRunner(desk.agent()),
        flow_type=flow_type(scenario),
        options=AgentSessionOptions(tool_policies=policies),
    )


def flow_from_env() -> AgentSessionFlow:
    return build_flow(os.environ[SCENARIO_ENV], Path(os.environ[STATE_DIR_ENV]))
