"""The support-desk agent built with LangChain's ``create_agent``, as a durable session.

The tools and the agent are ordinary LangChain code; the only Dex-specific lines are
``LangGraphRunner(agent)`` and the ``AgentSessionFlow`` around it.

Tools and their policies (from MCP-style hints in each tool's metadata):

* ``lookup_order`` (``readOnlyHint``: read): may run again after a crash.
* ``add_note`` (``idempotentHint``: idempotent write): may run again, always with the same
  idempotency key, which the fake ticket system uses to store the note once.
* ``issue_refund`` (``readOnlyHint=False``: non-idempotent write): runs at most once, and
  only after a person approves it.

The model is scripted (no network) unless ``OPENAI_API_KEY`` is set; then it is
``ChatOpenAI`` (model from ``OPENAI_MODEL``, default gpt-4o-mini).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dex_agents import AgentSessionFlow, AgentSessionOptions, current_tool_execution
from dex_agents.testing import MODEL_CALL_KIND, InvocationLog, tool_call_kind
from dex_agents_langgraph import (
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    LangGraphRunner,
    ScriptedChatModel,
)
from langchain.agents import create_agent
from langchain_core.tools import tool

FLOW_TYPE = "LangGraphSupportDesk"
STATE_DIR_ENV = "SUPPORT_DESK_STATE_DIR"
SYSTEM_PROMPT = (
    "You are the support desk of an online shop. Look orders up before acting. For a "
    "broken item, add a note to the order and refund its full total, in parallel."
)
ORDERS = {1042: {"order_id": 1042, "item": "espresso machine", "total": 249}}


def state_dir() -> Path:
    return Path(os.environ[STATE_DIR_ENV])


def log() -> InvocationLog:
    return InvocationLog(state_dir() / "calls.log")


def idempotency_key() -> str:
    execution = current_tool_execution()
    return execution.idempotency_key if execution is not None else "no-key"


# --------------------------------------------------------------------------- tools


@tool
def lookup_order(order_id: int) -> str:
    """Look an order up by its number."""
    log().record(tool_call_kind("lookup_order"), idempotency_key())
    return json.dumps(ORDERS.get(order_id, {"order_id": order_id, "error": "no such order"}))


@tool
def add_note(order_id: int, note: str) -> str:
    """Add a note to the order's support ticket."""
    key = idempotency_key()  # the same on every attempt of this tool call
    log().record(tool_call_kind("add_note"), key)
    notes = state_dir() / "ticket-notes.json"
    stored = json.loads(notes.read_text()) if notes.exists() else {}
    stored[key] = {"order_id": order_id, "note": note}  # one note per key
    notes.write_text(json.dumps(stored, indent=2))
    return f"note stored on order {order_id}"


@tool
def issue_refund(order_id: int, amount: int) -> str:
    """Refund an amount of dollars on an order."""
    log().record(tool_call_kind("issue_refund"), idempotency_key())
    return f"refund of ${amount} issued for order {order_id} (ref RF-{order_id}-1)"


lookup_order.metadata = {"readOnlyHint": True}
add_note.metadata = {"idempotentHint": True}
issue_refund.metadata = {"readOnlyHint": False}

# --------------------------------------------------------------------------- model


def scripted(call: FakeModelCall) -> FakeReply | str:
    log().record(MODEL_CALL_KIND, f"{call.turn_index}/{call.call_index}")
    if call.turn_index > 0:
        return "Anything else I can do?"
    if call.call_index == 0:
        return FakeReply(
            text="Sorry to hear that! Let me look up your order.",
            tool_calls=[FakeToolCall(name="lookup_order", args={"order_id": 1042})],
        )
    if call.call_index == 1:
        found = call.result_of("lookup_order")
        order = json.loads(str(found.content)) if found is not None else {}
        total = int(order.get("total", 0))
        return FakeReply(
            text=f"Found your {order.get('item', 'order')}. I'll note the damage and refund it.",
            tool_calls=[
                FakeToolCall(
                    name="add_note",
                    args={"order_id": 1042, "note": "Customer reports the item arrived broken."},
                ),
                FakeToolCall(name="issue_refund", args={"order_id": 1042, "amount": total}),
            ],
        )
    refund = call.result_of("issue_refund")
    if refund is not None and refund.status == "success":
        return f"Done: {refund.content}. It shows up in 3-5 business days."
    return f"I could not refund the order: {refund.content if refund else 'no refund ran'}"


def model() -> Any:
    if os.environ.get("OPENAI_API_KEY"):
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), temperature=0)
    return ScriptedChatModel(script=scripted)


def build_flow() -> AgentSessionFlow:
    """The session Flow (the same in the demo process and its Workers)."""
    agent = create_agent(
        model(), tools=[lookup_order, add_note, issue_refund], system_prompt=SYSTEM_PROMPT
    )
    return AgentSessionFlow(
        LangGraphRunner(agent), flow_type=FLOW_TYPE, options=AgentSessionOptions()
    )
