"""Agent Flows of the approval and reconciliation tests (test process and Worker child).

A Worker child serves every Flow here; ``APPROVAL_TEST_STATE_DIR`` names the directory
of its gates and of the files the tools write. ``APPROVAL_TEST_CLOCK_OFFSET_S`` shifts
the child's ``time.time`` (see ``approval_worker``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    AgentToolCall,
    ReconcileResult,
    ToolEffect,
    ToolPolicy,
)
from dex_agents.testing import (
    ModelCall,
    ScriptedModel,
    ScriptedResponse,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    current_tool_call,
)

STATE_DIR_ENV = "APPROVAL_TEST_STATE_DIR"
CLOCK_OFFSET_ENV = "APPROVAL_TEST_CLOCK_OFFSET_S"
LONG_DEADLINE = timedelta(seconds=60)
SHORT_DEADLINE = timedelta(seconds=2)


def _state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_ENV, "."))


def issue_refund(order_id: int, amount: int) -> str:
    return f"refunded {amount} on order {order_id}"


def wire_money(account: str, amount: int) -> str:
    return f"wired {amount} to {account}"


def flaky_refund(order_id: int, amount: int) -> str:
    """Applies the refund (a file named by the idempotency key), then loses the answer."""
    key = current_tool_call().idempotency_key.replace("/", "_")
    refunds = _state_dir() / "refunds"
    refunds.mkdir(parents=True, exist_ok=True)
    (refunds / key).write_text(f"RF-{order_id}-{amount}")
    raise ConnectionError("the payment service closed the connection")


def lost_transfer(account: str, amount: int) -> str:
    """Never applies anything, and fails so that nobody knows."""
    raise TimeoutError(f"no answer from the bank about {amount} to {account}")


def find_refund(call: AgentToolCall) -> ReconcileResult | None:
    """The read-back: does the refund the call's idempotency key names exist?"""
    path = _state_dir() / "refunds" / call.idempotency_key.replace("/", "_")
    if path.exists():
        return ReconcileResult(True, f"refund {path.read_text()} exists")
    return ReconcileResult(False, "no refund was recorded for this call")


TOOLS: dict[str, Callable[..., object]] = {
    "issue_refund": issue_refund,
    "wire_money": wire_money,
    "flaky_refund": flaky_refund,
    "lost_transfer": lost_transfer,
}

POLICIES = {
    "issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
    "wire_money": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, min_approvals=2),
    "flaky_refund": ToolPolicy(
        ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False, reconcile=find_refund
    ),
    "lost_transfer": ToolPolicy(
        ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False, await_reconciliation=True
    ),
}


def summarize(call: ModelCall) -> ScriptedResponse:
    """After tools: one line per result with the arguments it ran with and its outcome."""
    lines = [
        f"{r.tool_name} {dict(sorted(r.arguments.items()))}: {r.status}: {r.content}"
        for r in call.tool_results
    ]
    return ScriptedText(text="\n".join(lines))


def route(call: ModelCall) -> ScriptedResponse:
    text = call.user_text
    args: dict[str, object]
    if text.startswith("wire"):
        calls = [
            ScriptedToolCall(tool_name="wire_money", arguments={"account": "A", "amount": 500})
        ]
    elif text.startswith("flaky"):
        args = {"order_id": 9, "amount": 15}
        calls = [ScriptedToolCall(tool_name="flaky_refund", arguments=args)]
    elif text.startswith("transfer"):
        args = {"account": "B", "amount": 70}
        calls = [ScriptedToolCall(tool_name="lost_transfer", arguments=args)]
    else:
        calls = [
            ScriptedToolCall(tool_name="issue_refund", arguments={"order_id": 7, "amount": 30})
        ]
    return ScriptedToolCalls(calls=calls)


def model() -> ScriptedModel:
    return ScriptedModel(default=lambda c: route(c) if c.call_index == 0 else summarize(c))


def build_flows(state_dir: Path) -> dict[str, AgentSessionFlow]:
    """The Flows by name: ``main`` (gated refunds), ``long`` and ``short`` deadlines."""
    flows: dict[str, AgentSessionFlow] = {}
    for name, deadline in (("main", None), ("long", LONG_DEADLINE), ("short", SHORT_DEADLINE)):
        runner = ScriptedRunner(
            model(),
            TOOLS,
            gate_dir=state_dir,
            tool_gates={"issue_refund": "refund-{turn_id}"} if name == "main" else None,
        )
        options = AgentSessionOptions(tool_policies=POLICIES, interrupt_deadline=deadline)
        flows[name] = AgentSessionFlow(
            runner, flow_type=f"Approvals{name.title()}", options=options
        )
    return flows
