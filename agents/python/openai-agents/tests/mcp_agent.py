"""An OpenAI Agents SDK agent whose tools come from an MCP server (``source_tools``)."""

from __future__ import annotations

import asyncio
import os

from adapter_checks.mcp import URL_ENV
from agents import Agent
from dex_agents import AgentSessionFlow, MCPToolSource

from dex_agents_openai_agents import (
    FakeModel,
    FakeModelRequest,
    FakeResponse,
    FakeToolCall,
    OpenAIAgentsRunner,
    source_tools,
)

FLOW_TYPE = "OpenAIAgentsMcp"


def script(request: FakeModelRequest) -> FakeResponse | str:
    if request.call_index == 0 and "look up" in request.user_text:
        return FakeResponse(tool_calls=[FakeToolCall(name="lookup", arguments={"order_id": "7"})])
    if request.call_index == 0 and "address" in request.user_text:
        call = FakeToolCall(name="change_address", arguments={"order_id": "7"})
        return FakeResponse(tool_calls=[call])
    return "Result: " + "; ".join(request.tool_outputs.values())


async def build_flow(url: str) -> AgentSessionFlow:
    tools = await source_tools(MCPToolSource.http(url))
    agent = Agent(name="desk", model=FakeModel(script), tools=list(tools))
    return AgentSessionFlow(OpenAIAgentsRunner(agent), flow_type=FLOW_TYPE)


if __name__ == "__main__":
    from dex_agents.testing import run_agent_worker

    run_agent_worker([asyncio.run(build_flow(os.environ[URL_ENV]))])
