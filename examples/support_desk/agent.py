"""The support-desk agent: a scripted model, four tools, one durable session Flow.

The model is scripted (no network, no API key), but everything around it is real: each
model call is a RunModel Step, each tool call its own Step, and the refund waits in
AwaitToolApproval until a person answers.

Tools and their policies:

* ``lookup_order`` (read): may run again after a crash.
* ``add_note`` (idempotent write): may run again, always with the same idempotency key,
  which the fake ticket system uses to store the note once.
* ``text_customer`` (non-idempotent write, no approval): runs at most once; if its Worker
  dies while it runs, the call's outcome is ``outcome_unknown`` and it is not sent again.
* ``issue_refund`` (non-idempotent write): runs at most once, and only after approval.

The demo pauses the Worker at named file gates (``FileGate``) to SIGKILL it at exact
moments: inside the first model call (gate ``model-call``) and inside the three tool calls
of the first response (gates ``in-<tool name>``, reached after the tool did its work).
Released gates let the retries on the next Worker straight through.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from dex_agents import AgentSessionFlow, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents.testing import (
    FileGate,
    InvocationLog,
    ModelCall,
    ScriptedModel,
    ScriptedResponse,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    current_tool_call,
)

FLOW_TYPE = "SupportDeskAgent"
STATE_DIR_ENV = "SUPPORT_DESK_STATE_DIR"

ORDERS = {
    1042: {"order_id": 1042, "item": "espresso machine", "total": 249, "status": "delivered"},
}


def state_dir() -> Path:
    return Path(os.environ[STATE_DIR_ENV])


MODEL_GATE = "model-call"


def tool_gate(tool_name: str) -> str:
    """The gate a tool passes once its work is done, before it returns."""
    return f"in-{tool_name}"


def _append_json(name: str, key: str, value: object) -> None:
    path = state_dir() / name
    stored = json.loads(path.read_text()) if path.exists() else {}
    stored[key] = value
    path.write_text(json.dumps(stored, indent=2))


# --------------------------------------------------------------------------- tools


async def lookup_order(order_id: int) -> dict[str, object]:
    order = ORDERS.get(order_id)
    await FileGate(state_dir(), tool_gate("lookup_order")).pass_through()
    if order is None:
        return {"order_id": order_id, "error": "no such order"}
    return order


async def add_note(order_id: int, note: str) -> str:
    # The fake ticket system keeps one note per idempotency key: a re-run with the same
    # key replaces the note instead of adding a second one.
    key = current_tool_call().idempotency_key
    _append_json("ticket-notes.json", key, {"order_id": order_id, "note": note})
    await FileGate(state_dir(), tool_gate("add_note")).pass_through()
    return f"note stored on order {order_id}"


async def text_customer(message: str) -> str:
    # The fake SMS gateway has no idempotency key: every call sends one more text.
    outbox = state_dir() / "sms-outbox.jsonl"
    with outbox.open("a") as out:
        out.write(json.dumps({"message": message}) + "\n")
    await FileGate(state_dir(), tool_gate("text_customer")).pass_through()
    return "text message sent"


def issue_refund(order_id: int, amount: int) -> str:
    return f"refund of ${amount} issued for order {order_id} (ref RF-{order_id}-1)"


TOOLS: dict[str, Callable[..., object]] = {
    "lookup_order": lookup_order,
    "add_note": add_note,
    "text_customer": text_customer,
    "issue_refund": issue_refund,
}

POLICIES = {
    "lookup_order": ToolPolicy(ToolEffect.READ),
    "add_note": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
    "text_customer": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False),
    "issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),  # approval by default
}

# --------------------------------------------------------------------------- the model


def first_call(call: ModelCall) -> ScriptedResponse:
    return ScriptedToolCalls(
        text="Sorry to hear that! Let me look up your order and note the damage.",
        calls=[
            ScriptedToolCall(tool_name="lookup_order", arguments={"order_id": 1042}),
            ScriptedToolCall(
                tool_name="add_note",
                arguments={"order_id": 1042, "note": "Customer reports the item arrived broken."},
            ),
            ScriptedToolCall(
                tool_name="text_customer",
                arguments={"message": "We are on it: your refund request for order 1042."},
            ),
        ],
        gate=MODEL_GATE,
    )


def second_call(call: ModelCall) -> ScriptedResponse:
    found = call.result_of("lookup_order")
    order = json.loads(found.content) if found is not None else {}
    total = int(order.get("total", 0))
    texted = call.result_of("text_customer")
    sms = (
        "I could not confirm that my text reached you, so I will not send it again"
        if texted is not None and texted.status == "outcome_unknown"
        else "I texted you"
    )
    return ScriptedToolCalls(
        text=f"Found your {order.get('item', 'order')}; {sms}. I'll refund ${total}.",
        calls=[
            ScriptedToolCall(
                tool_name="issue_refund", arguments={"order_id": 1042, "amount": total}
            ),
        ],
    )


def final_call(call: ModelCall) -> ScriptedResponse:
    refund = call.result_of("issue_refund")
    if refund is not None and refund.status == "succeeded":
        return ScriptedText(text=f"Done: {refund.content}. It shows up in 3-5 business days.")
    reason = refund.content if refund is not None else "the refund did not run"
    return ScriptedText(text=f"I could not refund the order: {reason}")


def build_flow(directory: Path) -> AgentSessionFlow:
    """The support-desk session Flow (the same in the demo process and its Workers)."""
    runner = ScriptedRunner(
        ScriptedModel([[first_call, second_call, final_call]], default="Anything else?"),
        TOOLS,
        log=InvocationLog(directory / "calls.log"),
        gate_dir=directory,
    )
    return AgentSessionFlow(
        runner, flow_type=FLOW_TYPE, options=AgentSessionOptions(tool_policies=POLICIES)
    )
