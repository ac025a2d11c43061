"""The support-desk agent as a plain Pydantic AI ``Agent``, made durable by one line.

Tools (the same as examples/support_desk):

* ``lookup_order``: a read, declared with MCP-style ``readOnlyHint`` metadata.
* ``add_note``: an idempotent write; it reads its idempotency key with
  ``dex_agents.current_tool_execution()`` and the fake ticket system stores one note per key.
* ``issue_refund``: Pydantic AI's ``requires_approval=True``; a non-idempotent write.

The model is ``FakeModel`` (scripted, offline) unless ``OPENAI_API_KEY`` or
``ANTHROPIC_API_KEY`` is set (or ``DEX_EXAMPLE_MODEL`` names a Pydantic AI model).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
    current_tool_execution,
)
from dex_agents.testing import InvocationLog
from dex_agents_pydantic_ai import (
    FakeModel,
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    PydanticAIRunner,
)
from pydantic_ai import Agent

FLOW_TYPE = "PydanticAiSupportDesk"
STATE_DIR_ENV = "SUPPORT_DESK_STATE_DIR"
ORDERS = {1042: {"order_id": 1042, "item": "espresso machine", "total": 249}}


def state_dir() -> Path:
    return Path(os.environ[STATE_DIR_ENV])


def log() -> InvocationLog:
    return InvocationLog(state_dir() / "calls.log")


def idempotency_key() -> str:
    execution = current_tool_execution()
    return execution.idempotency_key if execution is not None else "outside-a-session"


# --------------------------------------------------------------------------- tools


def lookup_order(order_id: int) -> dict[str, object]:
    """Look an order up by its number."""
    log().record("tool:lookup_order", idempotency_key())
    return ORDERS.get(order_id, {"order_id": order_id, "error": "no such order"})


def add_note(order_id: int, note: str) -> str:
    """Add a note to the order's support ticket."""
    key = idempotency_key()
    log().record("tool:add_note", key)
    notes_file = state_dir() / "ticket-notes.json"
    notes = json.loads(notes_file.read_text()) if notes_file.exists() else {}
    notes[key] = {"order_id": order_id, "note": note}  # one note per key, however often
    notes_file.write_text(json.dumps(notes, indent=2))
    return f"note stored on order {order_id}"


def issue_refund(order_id: int, amount: int) -> str:
    """Refund an amount (in dollars) on an order."""
    log().record("tool:issue_refund", idempotency_key())
    return f"refund of ${amount} issued for order {order_id} (ref RF-{order_id}-1)"


# --------------------------------------------------------------------------- the model


def script(call: FakeModelCall) -> FakeReply | str:
    if call.call_index == 0:
        return FakeReply(
            text="Sorry to hear that! Let me look up your order.",
            tool_calls=[FakeToolCall(tool_name="lookup_order", arguments={"order_id": 1042})],
        )
    if call.call_index == 1:
        found = call.result_of("lookup_order")
        order: dict[str, Any] = json.loads(found.model_response_str()) if found else {}
        total = int(order.get("total", 0))
        return FakeReply(
            text=f"Found your {order.get('item')}. I'll note the damage and refund ${total}.",
            tool_calls=[
                FakeToolCall(
                    tool_name="add_note",
                    arguments={"order_id": 1042, "note": "Customer reports it arrived broken."},
                ),
                FakeToolCall(
                    tool_name="issue_refund", arguments={"order_id": 1042, "amount": total}
                ),
            ],
        )
    refund = call.result_of("issue_refund")
    if refund is not None and refund.outcome == "success":
        return f"Done: {refund.model_response_str()}. It shows up in 3-5 business days."
    reason = refund.model_response_str(wrap_if_error=False) if refund else "it did not run"
    return f"I could not refund the order: {reason}"


def model() -> Any:
    if os.environ.get("DEX_EXAMPLE_MODEL"):
        return os.environ["DEX_EXAMPLE_MODEL"]
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-3-5-haiku-latest"
    return FakeModel(script)


# --------------------------------------------------------------------------- the agent


def build_agent() -> Agent[None, str]:
    """The user's agent, exactly as it would be written without Dex."""
    agent = Agent(
        model(),
        instructions=(
            "You are a support-desk agent. Look the order up, add a note describing the "
            "problem, and refund the order total when the item arrived broken."
        ),
    )
    agent.tool_plain(metadata={"annotations": {"readOnlyHint": True}})(lookup_order)
    agent.tool_plain(metadata={"dex_effect": "idempotent_write"})(add_note)
    agent.tool_plain(requires_approval=True)(issue_refund)
    return agent


def build_flow() -> AgentSessionFlow:
    """The durable session Flow around the unchanged agent."""
    return AgentSessionFlow(
        PydanticAIRunner(build_agent()),
        flow_type=FLOW_TYPE,
        options=AgentSessionOptions(
            tool_policies={"issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
        ),
    )
