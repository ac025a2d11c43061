"""Agent Flows over MCPToolSource for the MCP tests, built alike in tests and Workers.

A Worker child reads ``MCP_TEST_STATE_DIR`` (gates and logs) and ``MCP_TEST_URL`` (the
streamable HTTP server the test started); the stdio Flow starts ``tests.mcp_server`` per
call with ``MCP_TEST_STDIO_GATES`` as its gated tools.
"""

from __future__ import annotations

import functools
import os
import sys
from datetime import timedelta
from pathlib import Path

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    AgentTurnContext,
    DeferredToolExecution,
    MCPToolSource,
    ModelStepOutcome,
    SourceTool,
    ToolEffect,
    ToolExecutionResult,
    ToolSource,
    current_tool_execution,
)
from dex_agents.testing import (
    ModelCall,
    ScriptedModel,
    ScriptedResponse,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
)

STATE_DIR_ENV = "MCP_TEST_STATE_DIR"
URL_ENV = "MCP_TEST_URL"
STDIO_GATES_ENV = "MCP_TEST_STDIO_GATES"
PACKAGE_DIR = Path(__file__).resolve().parents[1]

ROUTES: dict[str, tuple[str, dict[str, object]]] = {
    "look up": ("lookup", {"order_id": "7"}),
    "status": ("set_status", {"order_id": "7", "status": "held"}),
    "refund": ("refund", {"order_id": "7", "amount": 30}),
    "address": ("change_address", {"order_id": "7"}),
    "cancel": ("cancel_order", {"order_id": "7"}),
    "broken": ("broken", {}),
}


class SourceRunner(ScriptedRunner):
    """A scripted model whose tools are a ToolSource's (listed on first use)."""

    def __init__(self, source: ToolSource) -> None:
        super().__init__(ScriptedModel(default=self._respond))
        self.source = source
        self.effects: dict[str, ToolEffect | None] = {}

    async def _load(self) -> None:
        if not self.tools:
            for tool in await self.source.list_tools():
                self.tools[tool.name] = functools.partial(self._call, tool)
                self.effects[tool.name] = tool.effect

    async def _call(self, tool: SourceTool, **arguments: object) -> str:
        call = current_tool_execution()
        assert call is not None
        return await self.source.call_tool(tool, arguments, call)

    def _respond(self, call: ModelCall) -> ScriptedResponse:
        if call.call_index > 0:
            lines = [f"{r.tool_name}: {r.status}: {r.content}" for r in call.tool_results]
            return ScriptedText(text="\n".join(lines))
        for word, (name, arguments) in ROUTES.items():
            if word in call.user_text:
                effect = self.effects.get(name)
                tool = ScriptedToolCall(tool_name=name, arguments=arguments, effect=effect)
                return ScriptedToolCalls(calls=[tool])
        return ScriptedText(text=f"echo: {call.user_text}")

    async def run_model_step(self, turn: AgentTurnContext) -> ModelStepOutcome:
        await self._load()
        return await super().run_model_step(turn)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        await self._load()
        return await super().execute_deferred_tool_call(call)


def stdio_source(state_dir: Path, gates: str) -> MCPToolSource:
    env = {
        "MCP_TEST_STATE_DIR": str(state_dir),
        "MCP_TEST_GATES": gates,
        "PYTHONPATH": str(PACKAGE_DIR),
    }
    return MCPToolSource.stdio(
        sys.executable, ["-m", "tests.mcp_server"], env=env, cwd=str(PACKAGE_DIR)
    )


def build_flows(state_dir: Path, url: str, stdio_gates: str = "") -> list[AgentSessionFlow]:
    return [
        AgentSessionFlow(SourceRunner(MCPToolSource.http(url)), flow_type="AgentMcpHttp"),
        AgentSessionFlow(
            SourceRunner(stdio_source(state_dir, stdio_gates)), flow_type="AgentMcpStdio"
        ),
        AgentSessionFlow(
            SourceRunner(MCPToolSource.http(url)),
            flow_type="AgentMcpDeadline",
            options=AgentSessionOptions(interrupt_deadline=timedelta(seconds=2)),
        ),
    ]


def flows_from_env() -> list[AgentSessionFlow]:
    return build_flows(
        Path(os.environ[STATE_DIR_ENV]),
        os.environ[URL_ENV],
        os.environ.get(STDIO_GATES_ENV, ""),
    )
