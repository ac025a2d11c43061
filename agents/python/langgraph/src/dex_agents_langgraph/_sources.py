"""Tool sources (MCP servers, Connectors) as LangChain tools."""

from __future__ import annotations

from typing import Any

from dex_agents import SourceTool, ToolExecutionError, ToolSource, current_tool_execution
from langchain_core.tools import BaseTool, StructuredTool, ToolException

from dex_agents_langgraph._policies import DEX_EFFECT_KEY


async def source_tools(source: ToolSource) -> list[BaseTool]:
    """Return a ``ToolSource``'s tools as LangChain ``StructuredTool`` s.

    Give them to the graph like any tool (``create_agent(model, tools=...)`` or a
    ``ToolNode``). Each takes the source's JSON Schema as its ``args_schema`` and carries
    the source's effect as ``metadata["dex_effect"]``, so the session resolves its policy
    from it (an explicit ``tool_policies`` entry still wins). Calls run in their own tool
    Steps through ``source.call_tool``; a source's ``ToolExecutionError`` reaches the model
    as a failed call, and a question the tool asks becomes a ``question`` interrupt.

    Raises:
        Exception: whatever ``source.list_tools()`` raises.

    """
    return [_tool(source, tool) for tool in await source.list_tools()]


def _tool(source: ToolSource, tool: SourceTool) -> BaseTool:
    async def run(**arguments: Any) -> str:
        call = current_tool_execution()
        if call is None:
            raise RuntimeError(f"{tool.name!r} runs only inside a dex-agents tool Step")
        try:
            return await source.call_tool(tool, arguments, call)
        except ToolExecutionError as error:
            raise ToolException(error.message) from error

    metadata = {} if tool.effect is None else {DEX_EFFECT_KEY: tool.effect.value}
    return StructuredTool.from_function(
        coroutine=run,
        name=tool.name,
        description=tool.description,
        args_schema=tool.input_schema,
        metadata=metadata,
    )
