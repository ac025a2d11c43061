"""The support-desk agent of the tests, built with the real Claude Agent SDK.

Tests and Worker children build the same Flow: ``build_flow(scenario, state_dir)``. A
Worker child reads both from its environment (``flow_from_env``) and runs the SDK's
bundled CLI, which calls the test process's ``FakeMessagesServer`` (``script``). Every
real tool call and model call is recorded in ``<state_dir>/calls.log``; ``FileGate`` s
named by the scenario pause a call so a test can SIGKILL the Worker at that exact point.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, ToolAnnotations, create_sdk_mcp_server, tool
from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
    current_tool_execution,
)
from dex_agents.testing import FileGate, InvocationLog

from dex_agents_claude_agent_sdk import ClaudeAgentRunner
from dex_agents_claude_agent_sdk.testing import FakeReply, FakeToolCall, ModelCall

SCENARIO_ENV = "CLAUDE_SDK_TEST_SCENARIO"
STATE_DIR_ENV = "CLAUDE_SDK_TEST_STATE_DIR"
MODEL_KIND = "model"
CRASH_AMOUNT = 999
SERVER = "desk"
TOOLS = ("lookup_order", "add_note", "issue_refund")

ORDERS = {1042: {"order_id": 1042, "item": "espresso machine", "total": 249}}

GATED_TOOLS = {"crash_note": ("add_note",), "crash_refund": ("issue_refund",)}
MODEL_GATES = {"crash_model": "model-turn-1-call-1", "crash_inner": "model-turn-1-call-1"}
NO_APPROVAL_SCENARIOS = {
    "sequential",
    "parallel",
    "parallel_later",
    "crash_note",
    "crash_refund",
    "crash_model",
}
PARALLEL_SCENARIOS = {"parallel"}
# The first response asks for one tool, a later one for several at once.
LATER_PARALLEL_SCENARIOS = {"parallel_later"}
BASH_SCENARIOS = {"bash"}
# The agent serves a tool from an SDK MCP server of its own: the CLI runs it in RunModel.
INNER_SCENARIOS = {"inner", "crash_inner"}
INNER_SERVER = "shop"
INNER_KIND = "inner:store_hours"


def tool_kind(name: str) -> str:
    return f"tool:{name}"


def cli_name(name: str) -> str:
    return f"mcp__{SERVER}__{name}"


def text_result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}]}


class SupportDesk:
    """Tools of one scenario; everything they record goes to state_dir."""

    def __init__(self, scenario: str, state_dir: Path) -> None:
        self.scenario = scenario
        self.state_dir = state_dir
        self.log = InvocationLog(state_dir / "calls.log")

    async def _enter_tool(self, name: str) -> str:
        execution = current_tool_execution()
        if execution is None:
            # The same agent run by the SDK alone (the control run of the tests).
            self.log.record(f"direct:{name}", "direct")
            return "direct"
        self.log.record(tool_kind(name), execution.idempotency_key, f"attempt={execution.attempt}")
        if name in GATED_TOOLS.get(self.scenario, ()):
            await FileGate(self.state_dir, f"tool-{name}").pass_through()
        return execution.idempotency_key

    def notes(self) -> dict[str, object]:
        path = self.state_dir / "ticket-notes.json"
        return dict(json.loads(path.read_text())) if path.exists() else {}

    def tools(self) -> list[Any]:
        @tool(
            "lookup_order",
            "Look an order up by its number.",
            {"order_id": int},
            annotations=ToolAnnotations(readOnlyHint=True),
        )
        async def lookup_order(args: dict[str, Any]) -> dict[str, Any]:
            await self._enter_tool("lookup_order")
            order = ORDERS.get(int(args["order_id"]))
            if order is None:
                return {**text_result(f"no order {args['order_id']}"), "is_error": True}
            return text_result(json.dumps(order))

        @tool(
            "add_note",
            "Add a note to the order's ticket.",
            {"order_id": int, "note": str},
            annotations=ToolAnnotations(idempotentHint=True),
        )
        async def add_note(args: dict[str, Any]) -> dict[str, Any]:
            key = await self._enter_tool("add_note")
            notes = self.notes()
            notes[key] = {"order_id": args["order_id"], "note": args["note"]}
            (self.state_dir / "ticket-notes.json").write_text(json.dumps(notes))
            return text_result(f"note stored on order {args['order_id']}")

        @tool("issue_refund", "Refund an amount on an order.", {"order_id": int, "amount": int})
        async def issue_refund(args: dict[str, Any]) -> dict[str, Any]:
            await self._enter_tool("issue_refund")
            if int(args["amount"]) == CRASH_AMOUNT:
                raise RuntimeError("the payment service closed the connection")
            return text_result(f"refund of ${args['amount']} issued for order {args['order_id']}")

        return [lookup_order, add_note, issue_refund]

    def inner_tools(self) -> list[Any]:
        @tool("store_hours", "Opening hours of the shop.", {})
        async def store_hours(args: dict[str, Any]) -> dict[str, Any]:
            # No tool Step runs it: current_tool_execution() is None inside RunModel.
            self.log.record(
                INNER_KIND, "in-step", f"tool_step={current_tool_execution() is not None}"
            )
            return text_result("open 9 to 17")

        return [store_hours]


# ---------------------------------------------------------------------- the model


def _tool_request(name: str, text: str) -> FakeToolCall:
    arguments: dict[str, Any] = {"order_id": 1042}
    if name == "add_note":
        arguments["note"] = "arrived broken"
    if name == "issue_refund":
        arguments["amount"] = CRASH_AMOUNT if "crash" in text else 249
    return FakeToolCall(cli_name(name), arguments)


def script(scenario: str, call: ModelCall) -> FakeReply | str:
    """The model of every scenario (runs in the test process, behind the fake API)."""
    text = call.user_text
    if "hello" in text:
        return FakeReply(text="Hello! How can I help?", thinking="A greeting.")
    if "remember" in text:
        seen = call.saw_text("espresso machine")
        return f"Earlier you asked about the espresso machine: {seen}."
    if scenario in BASH_SCENARIOS:
        if not call.tool_results:
            command = f"echo refunded > {text.split()[-1]}"
            return FakeReply(
                text="Writing it.", tool_calls=(FakeToolCall("Bash", {"command": command}),)
            )
        result = call.tool_results[-1]
        return f"Bash[{'error' if result.is_error else 'ok'}]={result.text}"
    if scenario in INNER_SCENARIOS:
        if not call.tool_results:
            hours = FakeToolCall(f"mcp__{INNER_SERVER}__store_hours", {})
            return FakeReply(text="Checking the hours.", tool_calls=(hours,))
        return f"Hours: {call.tool_results[-1].text}"
    done = {r.tool_name for r in call.tool_results if "Not run" not in r.text}
    missing = [name for name in TOOLS if cli_name(name) not in done]
    if missing:
        wanted = missing if scenario in PARALLEL_SCENARIOS else missing[:1]
        if scenario in LATER_PARALLEL_SCENARIOS and len(missing) < len(TOOLS):
            wanted = missing
        return FakeReply(
            text="Let me handle that.", tool_calls=tuple(_tool_request(n, text) for n in wanted)
        )
    latest: dict[str, str] = {}
    for result in call.tool_results:
        if "Not run" not in result.text:
            status = "error" if result.is_error else "ok"
            latest[result.tool_name.removeprefix(f"mcp__{SERVER}__")] = f"[{status}]={result.text}"
    results = "; ".join(f"{name}{latest[name]}" for name in TOOLS)
    return f"Done. Results: {results}"


# ---------------------------------------------------------------------- the Flow


def flow_type(scenario: str) -> str:
    return "ClaudeDesk" + "".join(word.title() for word in scenario.split("_"))


def agent_options(scenario: str, state_dir: Path) -> ClaudeAgentOptions:
    allowed = ["Bash"] if scenario in BASH_SCENARIOS else []
    servers: dict[str, Any] = {}
    if scenario in INNER_SCENARIOS:
        inner = SupportDesk(scenario, state_dir).inner_tools()
        servers[INNER_SERVER] = create_sdk_mcp_server(INNER_SERVER, tools=inner)
        allowed.append(f"mcp__{INNER_SERVER}__store_hours")
    return ClaudeAgentOptions(
        system_prompt="You are a support-desk agent. Use the tools.",
        tools=["Bash"] if scenario in BASH_SCENARIOS else [],
        allowed_tools=allowed,
        mcp_servers=servers,
        setting_sources=[],
        cwd=str(state_dir),
    )


def build_flow(scenario: str, state_dir: Path) -> AgentSessionFlow:
    desk = SupportDesk(scenario, state_dir)
    policies: dict[str, ToolPolicy] = {}
    if scenario in NO_APPROVAL_SCENARIOS:
        policies["issue_refund"] = ToolPolicy(
            ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False
        )
    if scenario in BASH_SCENARIOS:
        policies["Bash"] = ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=True)
    return AgentSessionFlow(
        ClaudeAgentRunner(
            agent_options(scenario, state_dir), tools=desk.tools(), server_name=SERVER
        ),
        flow_type=flow_type(scenario),
        options=AgentSessionOptions(tool_policies=policies),
    )


def flow_from_env() -> AgentSessionFlow:
    return build_flow(os.environ[SCENARIO_ENV], Path(os.environ[STATE_DIR_ENV]))
