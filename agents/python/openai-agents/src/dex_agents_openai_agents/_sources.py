"""Tool sources (MCP servers, Connectors) as OpenAI Agents SDK function tools."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agents import FunctionTool
from agents.tool_context import ToolContext
from dex_agents import SourceTool, ToolEffect, ToolSource, current_tool_execution


@dataclass
class SourceFunctionTool(FunctionTool):
    """A ``FunctionTool`` built from a ``ToolSource`` tool; ``dex_effect`` is its effect.

    ``framework_effect`` reads ``dex_effect`` (None: the session default applies).
    """

    dex_effect: ToolEffect | None = None


async def source_tools(source: ToolSource) -> list[FunctionTool]:
    """Return a ``ToolSource``'s tools as OpenAI Agents SDK ``FunctionTool`` s.

    Pass them to the agent: ``Agent(name=..., tools=await source_tools(source))``. Each
    keeps the source's JSON Schema as ``params_json_schema`` (not strict) and its effect,
    which the session resolves the policy from (an explicit ``tool_policies`` entry still
    wins). Calls run in their own tool Steps through ``source.call_tool``; a source's
    ``ToolExecutionError`` reaches the model as a failed call, and a question the tool
    asks becomes a ``question`` interrupt.

    Raises:
        Exception: whatever ``source.list_tools()`` raises.

    """
    return [_tool(source, tool) for tool in await source.list_tools()]


def _tool(source: ToolSource, tool: SourceTool) -> FunctionTool:
    async def invoke(context: ToolContext[Any], arguments: str) -> str:
        call = current_tool_execution()
        if call is None:
            raise RuntimeError(f"{tool.name!r} runs only inside a dex-agents tool Step")
        parsed = json.loads(arguments) if arguments else {}
        return await source.call_tool(tool, parsed, call)

    return SourceFunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.input_schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
        dex_effect=tool.effect,
    )
