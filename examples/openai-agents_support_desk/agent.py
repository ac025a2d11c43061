"""The support-desk agent written with the OpenAI Agents SDK, run as a durable session.

The agent below is plain OpenAI Agents SDK code: ``@function_tool`` tools and an
``Agent``. Only ``build_flow`` knows about Dex: it attaches ``OpenAIAgentsRunner`` to the
agent and gives each tool its effect class.

* ``lookup_order`` (read): may run again after a crash.
* ``add_note`` (idempotent write): may run again, always with the same idempotency key
  (read with ``dex_agents.current_tool_execution()``), which the fake ticket system uses
  to store the note once.
* ``issue_refund`` (non-idempotent write): runs at most once, and only after approval.

The model is ``FakeModel`` (scripted, offline) unless ``SUPPORT_DESK_MODEL`` names a real
OpenAI model (run.py sets it when ``OPENAI_API_KEY`` is set).
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
from dex_agents_openai_agents import (
    FakeModel,
    FakeModelRequest,
    FakeResponse,
    FakeToolCall,
    OpenAIAgentsRunner,
)

from agents import Agent, Model, function_tool

FLOW_TYPE = "OpenAISupportDeskAgent"
STATE_DIR_ENV = "SUPPORT_DESK_STATE_DIR"
MODEL_ENV = "SUPPORT_DESK_MODEL"
FAKE = "fake"

ORDERS = {
    1042: {"order_id": 1042, "item": "espresso machine", "total": 249, "status": "delivered"},
}


def state_dir() -> Path:
    return Path(os.environ[STATE_DIR_ENV])


def log() -> InvocationLog:
    return InvocationLog(state_dir() / "calls.log")


# --------------------------------------------------------------------------- tools


def _key() -> str:
    execution = current_tool_execution()
    return execution.idempotency_key if execution is not None else "outside-dex"


@function_tool
def lookup_order(order_id: int) -> dict[str, Any]:
    """Look up an order by its number."""
    log().record("tool:lookup_order", _key())
    return ORDERS.get(order_id, {"order_id": order_id, "error": "no such order"})


@function_tool
def add_note(order_id: int, note: str) -> str:
    """Add a note to the order's support ticket."""
    key = _key()
    log().record("tool:add_note", key)
    # The fake ticket system keeps one note per idempotency key.
    notes = state_dir() / "ticket-notes.json"
    stored = json.loads(notes.read_text()) if notes.exists() else {}
    stored[key] = {"order_id": order_id, "note": note}
    notes.write_text(json.dumps(stored, indent=2))
    return f"note stored on order {order_id}"


@function_tool
def issue_refund(order_id: int, amount: int) -> str:
    """Refund an amount in dollars on an order."""
    log().record("tool:issue_refund", _key())
    return f"refund of ${amount} issued for order {order_id} (ref RF-{order_id}-1)"


POLICIES = {
    "lookup_order": ToolPolicy(ToolEffect.READ),
    "add_note": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
    "issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),  # approval by default
}

# --------------------------------------------------------------------------- the fake model


def script(request: FakeModelRequest) -> FakeResponse | str:
    """Look up, then note and refund in parallel, then answer."""
    if request.call_index == 0:
        return FakeResponse(
            text="Sorry to hear that! Let me look up your order.",
            tool_calls=[FakeToolCall(name="lookup_order", arguments={"order_id": 1042})],
        )
    if request.call_index == 1:
        order = json.loads(request.output_of("lookup_order") or "{}")
        total = int(order.get("total", 0))
        return FakeResponse(
            text=f"Found your {order.get('item', 'order')}. I'll note it and refund ${total}.",
            tool_calls=[
                FakeToolCall(
                    name="add_note",
                    arguments={"order_id": 1042, "note": "Customer reports it arrived broken."},
                ),
                FakeToolCall(name="issue_refund", arguments={"order_id": 1042, "amount": total}),
            ],
        )
    refund = request.output_of("issue_refund") or "the refund did not run"
    if refund.startswith("refund of"):
        return f"Done: {refund}. It shows up in 3-5 business days."
    return f"I could not refund the order: {refund}"


def model() -> Model | str:
    name = os.environ.get(MODEL_ENV, FAKE)
    if name != FAKE:
        return name
    return FakeModel(script, on_call=lambda _request: log().record("model", "call"))


def build_agent() -> Agent[Any]:
    return Agent(
        name="support-desk",
        instructions=(
            "You are a support-desk agent. Look the order up first. For a broken item, "
            "add a note to the ticket and refund the order total, in parallel."
        ),
        model=model(),
        tools=[lookup_order, add_note, issue_refund],
    )


def build_flow() -> AgentSessionFlow:
    """The session Flow (the same in the demo process and its Workers)."""
    runner = OpenAIAgentsRunner(build_agent())
    return AgentSessionFlow(
        runner, flow_type=FLOW_TYPE, options=AgentSessionOptions(tool_policies=POLICIES)
    )
