"""A LangGraph agent (``create_agent``) whose tools come from an MCP server."""

from __future__ import annotations

import asyncio
import os

from adapter_checks.mcp import URL_ENV
from dex_agents import AgentSessionFlow, MCPToolSource
from langchain.agents import create_agent

from dex_agents_langgraph import (
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    LangGraphRunner,
    ScriptedChatModel,
    source_tools,
)

FLOW_TYPE = "LangGraphMcp"


def script(call: FakeModelCall) -> FakeReply | str:
    if call.call_index == 0 and "look up" in call.user_text:
        return FakeReply(tool_calls=[FakeToolCall(name="lookup", args={"order_id": "7"})])
    if call.call_index == 0 and "address" in call.user_text:
        return FakeReply(tool_calls=[FakeToolCall(name="change_address", args={"order_id": "7"})])
    return "Result: " + "; ".join(str(m.content) for m in call.tool_results)


async def build_flow(url: str) -> AgentSessionFlow:
    tools = await source_tools(MCPToolSource.http(url))
    agent = create_agent(ScriptedChatModel(script=script), tools=tools)
    return AgentSessionFlow(LangGraphRunner(agent), flow_type=FLOW_TYPE)


if __name__ == "__main__":
    from dex_agents.testing import run_agent_worker

    run_agent_worker([asyncio.run(build_flow(os.environ[URL_ENV]))])
