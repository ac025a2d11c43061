"""Tool sources (MCP servers, Connectors) as Pydantic AI tools."""

from __future__ import annotations

from typing import Any

from dex_agents import SourceTool, ToolExecutionError, ToolSource, current_tool_execution
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.tools import Tool

from dex_agents_pydantic_ai._policies import DEX_EFFECT_METADATA_KEY


async def source_tools(source: ToolSource) -> list[Tool[Any]]:
    """Return a ``ToolSource``'s tools as Pydantic AI ``Tool`` objects.

    Pass them to the agent: ``Agent(model, tools=await source_tools(MCPToolSource...))``.
    Each keeps the source's JSON Schema and carries the source's effect as
    ``metadata["dex_effect"]``, so the session resolves its policy from it (an explicit
    ``tool_policies`` entry still wins). Calls run in their own tool Steps through
    ``source.call_tool``; a source's ``ToolExecutionError`` reaches the model as a failed
    call, and a question the tool asks becomes a ``question`` interrupt.

    Raises:
        Exception: whatever ``source.list_tools()`` raises.

    """
    return [_tool(source, tool) for tool in await source.list_tools()]


def _tool(source: ToolSource, tool: SourceTool) -> Tool[Any]:
    async def run(**arguments: Any) -> str:
        call = current_tool_execution()
        if call is None:
            raise RuntimeError(f"{tool.name!r} runs only inside a dex-agents tool Step")
        try:
            return await source.call_tool(tool, arguments, call)
        except ToolExecutionError as error:
            raise ToolFailed(error.message) from error

    native: Tool[Any] = Tool.from_schema(run, tool.name, tool.description, tool.input_schema)
    if tool.effect is not None:
        native.metadata = {DEX_EFFECT_METADATA_KEY: tool.effect.value}
    return native
