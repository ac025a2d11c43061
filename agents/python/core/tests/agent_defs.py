"""Agent Flows of the integration tests, built the same way in tests and Worker children.

A Worker child learns what to serve from its environment: ``AGENT_TEST_SCENARIOS`` (comma
separated scenario names) and ``AGENT_TEST_STATE_DIR`` (gates and the invocation log).
Each scenario is one ``AgentSessionFlow`` with its own flow type and scripted model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    FrameworkMessage,
    MessageRole,
    ToolEffect,
    ToolExecutionError,
    ToolPolicy,
)
from dex_agents.testing import (
    InvocationLog,
    ModelCall,
    ScriptedContinue,
    ScriptedFailure,
    ScriptedModel,
    ScriptedResponse,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    current_tool_call,
)

SCENARIOS_ENV = "AGENT_TEST_SCENARIOS"
STATE_DIR_ENV = "AGENT_TEST_STATE_DIR"
FAILURE_NOTE_PREFIX = "[Dex] The previous turn failed after these tool calls ran:"

# --------------------------------------------------------------------------- tools


def lookup_order(order_id: int) -> dict[str, object]:
    return {"order_id": order_id, "status": "shipped", "total": 42}


def add_note(order_id: int, note: str) -> str:
    key = current_tool_call().idempotency_key
    return f"note added to order {order_id} with key {key}"


def issue_refund(order_id: int, amount: int) -> str:
    return f"refunded {amount} on order {order_id}"


def slow_read(name: str) -> str:
    return f"value of {name}"


def failing_tool() -> str:
    raise ToolExecutionError("the inventory service said no")


TOOLS: dict[str, Callable[..., object]] = {
    "lookup_order": lookup_order,
    "add_note": add_note,
    "issue_refund": issue_refund,
    "slow_read": slow_read,
    "failing_tool": failing_tool,
}

POLICIES = {
    "lookup_order": ToolPolicy(ToolEffect.READ),
    "slow_read": ToolPolicy(ToolEffect.READ),
    "failing_tool": ToolPolicy(ToolEffect.READ),
    "add_note": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
    "issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
}

# --------------------------------------------------------------------------- models


def summarize(call: ModelCall) -> ScriptedResponse:
    """The answer after tool calls: one line per result, with status and content."""
    lines = [f"{r.tool_name}#{r.tool_call_id}: {r.status}: {r.content}" for r in call.tool_results]
    return ScriptedText(text="\n".join(lines) or "no tools ran")


def route(call: ModelCall) -> ScriptedResponse:
    """First model call of a turn: pick a tool from keywords of the user's message."""
    text = call.user_text.lower()
    if "refund" in text:
        calls = [
            ScriptedToolCall(tool_name="issue_refund", arguments={"order_id": 7, "amount": 30})
        ]
    elif "note" in text:
        arguments = {"order_id": 7, "note": "customer called"}
        calls = [ScriptedToolCall(tool_name="add_note", arguments=arguments)]
    elif "look up" in text or "order" in text:
        calls = [ScriptedToolCall(tool_name="lookup_order", arguments={"order_id": 7})]
    elif "parallel" in text:
        calls = [
            ScriptedToolCall(tool_name="slow_read", arguments={"name": "a"}),
            ScriptedToolCall(tool_name="slow_read", arguments={"name": "b"}),
        ]
    elif "broken" in text:
        calls = [ScriptedToolCall(tool_name="failing_tool")]
    else:
        return ScriptedText(text=f"echo: {call.user_text}")
    return ScriptedToolCalls(calls=calls, text="Let me check.")


def router_model() -> ScriptedModel:
    """Every turn: route on the first call, summarize after tool results."""

    def step(call: ModelCall) -> ScriptedResponse:
        return route(call) if call.call_index == 0 else summarize(call)

    return ScriptedModel(default=step)


def model_crash_model() -> ScriptedModel:
    """Turn 1: a read, then an answer that passes the gate ``model-1`` (crash point)."""
    lookup = ScriptedToolCall(tool_name="lookup_order", arguments={"order_id": 7})
    return ScriptedModel(
        [[ScriptedToolCalls(calls=[lookup]), ScriptedText(text="order 7 shipped", gate="model-1")]]
    )


def failing_turn_model() -> ScriptedModel:
    """Turn 1 runs a read, then its model call always fails; turn 2 reads the note."""
    lookup = ScriptedToolCall(tool_name="lookup_order", arguments={"order_id": 7})

    def second_turn(call: ModelCall) -> ScriptedResponse:
        notes = [m for m in call.messages if m.text.startswith(FAILURE_NOTE_PREFIX)]
        return ScriptedText(text=f"saw {len(notes)} failure note(s)")

    return ScriptedModel(
        [[ScriptedToolCalls(calls=[lookup]), ScriptedFailure(message="model down")], [second_turn]]
    )


def bad_ids_model() -> ScriptedModel:
    """Turns 1-4 request tool calls with invalid IDs; later turns answer normally."""

    def calls(*ids: str) -> ScriptedToolCalls:
        return ScriptedToolCalls(
            calls=[
                ScriptedToolCall(
                    tool_name="lookup_order", arguments={"order_id": 1}, tool_call_id=i
                )
                for i in ids
            ]
        )

    return ScriptedModel(
        [
            [calls("")],
            [calls("a/b")],
            [calls("dup", "dup")],
            [calls("x"), calls("x")],  # the second batch repeats an ID of the first
        ],
        default=lambda call: ScriptedText(text=f"fine: {call.user_text}"),
    )


def history_model() -> ScriptedModel:
    """Every turn answers with how many messages it saw (for snapshots and listing)."""

    def count(call: ModelCall) -> ScriptedResponse:
        users = sum(m.role is MessageRole.USER for m in call.messages)
        return ScriptedText(text=f"{len(call.messages)} messages, {users} from the user")

    return ScriptedModel(default=count)


def event_model() -> ScriptedModel:
    """Turn 1: one read; the second model call fails on attempt 1, then answers."""
    lookup = ScriptedToolCall(tool_name="lookup_order", arguments={"order_id": 7})
    return ScriptedModel(
        [[ScriptedToolCalls(calls=[lookup]), ScriptedText(text="all done", fail_attempts=1)]]
    )


def steer_model() -> ScriptedModel:
    """Like the router, but every model call passes gate ``model-<turn_id>-<call index>``."""

    def step(call: ModelCall) -> ScriptedResponse:
        response = route(call) if call.call_index == 0 else summarize(call)
        return replace(response, gate="model-{turn_id}-{call_index}")

    return ScriptedModel(default=step)


def continue_model() -> ScriptedModel:
    """Turn 1: a handoff, then the other agent's answer behind gate ``continue-1``.

    Turn 2: a read, a validation retry, then an answer naming the read's result.
    """

    def after_retry(call: ModelCall) -> ScriptedResponse:
        result = call.result_of("lookup_order")
        return ScriptedText(text=f"retried; saw {result.content if result else 'nothing'}")

    lookup = ScriptedToolCall(tool_name="lookup_order", arguments={"order_id": 7})
    return ScriptedModel(
        [
            [
                ScriptedContinue(reason="handoff", text="Handing you to billing."),
                ScriptedText(text="billing: order 7 is paid", gate="continue-{call_index}"),
            ],
            [
                ScriptedToolCalls(calls=[lookup]),
                ScriptedContinue(reason="validation_retry"),
                after_retry,
            ],
        ]
    )


CONTINUE_LOOP_LIMIT = 3


def continue_loop_model() -> ScriptedModel:
    """Turn 1 hands off for ever (the limit ends it); later turns answer."""

    def step(call: ModelCall) -> ScriptedResponse:
        if call.turn_number == 1:
            return ScriptedContinue(reason="handoff")
        return ScriptedText(text=f"answered: {call.user_text}")

    return ScriptedModel(default=step)


# --------------------------------------------------------------------------- scenarios


class FlakyUserMessageRunner(ScriptedRunner):
    """``build_user_message`` fails the first time it sees a text starting with "flaky".

    A marker file in the scenario's state folder remembers that first time across
    processes, and tells the test that a Step took the message and failed with it.
    """

    def __init__(self, *args: Any, marker: Path, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._marker = marker

    def build_user_message(self, text: str) -> FrameworkMessage:
        if text.startswith("flaky") and not self._marker.exists():
            self._marker.touch()
            raise ValueError("this runner fails a flaky message once")
        return super().build_user_message(text)


FLAKY_MARKER = "flaky-message-failed"

_MODELS: dict[str, Callable[[], ScriptedModel]] = {
    "router": router_model,
    "gated": router_model,
    "flaky_message": router_model,
    "model_crash": model_crash_model,
    "failing_turn": failing_turn_model,
    "bad_ids": bad_ids_model,
    "history": history_model,
    "events": event_model,
    "deadline": router_model,
    "steer": steer_model,
    "continue": continue_model,
    "continue_loop": continue_loop_model,
}

_GATES: dict[str, dict[str, str]] = {
    "flaky_message": {"lookup_order": "lookup_order"},
    "gated": {
        "lookup_order": "lookup_order",
        "add_note": "add_note",
        "issue_refund": "issue_refund",
        "slow_read": "slow-{tool_call_id}",
    },
    "steer": {"lookup_order": "lookup_order", "issue_refund": "issue_refund"},
}


def flow_type(scenario: str) -> str:
    return "Agent" + "".join(part.title() for part in scenario.split("_"))


def build_flow(scenario: str, state_dir: Path) -> AgentSessionFlow:
    """The scenario's Flow; the same in the test process and the Worker child."""
    runner_type: Any = ScriptedRunner
    extra: dict[str, Any] = {}
    if scenario == "flaky_message":
        runner_type, extra = FlakyUserMessageRunner, {"marker": state_dir / FLAKY_MARKER}
    runner = runner_type(
        _MODELS[scenario](),
        TOOLS,
        log=InvocationLog(state_dir / "calls.log"),
        gate_dir=state_dir,
        tool_gates=_GATES.get(scenario),
        **extra,
    )
    deadline = timedelta(seconds=1) if scenario == "deadline" else None
    calls = CONTINUE_LOOP_LIMIT if scenario == "continue_loop" else 50
    options = AgentSessionOptions(
        tool_policies=POLICIES, interrupt_deadline=deadline, max_model_calls_per_turn=calls
    )
    return AgentSessionFlow(runner, flow_type=flow_type(scenario), options=options)


def flows_from_env() -> list[AgentSessionFlow]:
    state_dir = Path(os.environ[STATE_DIR_ENV])
    names = [name for name in os.environ[SCENARIOS_ENV].split(",") if name]
    return [build_flow(name, state_dir) for name in names]


def arguments_json(**arguments: object) -> str:
    return json.dumps(arguments, sort_keys=True)
