"""A Pydantic AI agent whose tools come from an MCP server (``source_tools``)."""

from __future__ import annotations

import asyncio
import os

from adapter_checks.mcp import URL_ENV
from dex_agents import AgentSessionFlow, MCPToolSource
from pydantic_ai import Agent

from dex_agents_pydantic_ai import (
    FakeModel,
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    PydanticAIRunner,
    source_tools,
)

FLOW_TYPE = "PydanticAIMcp"


def script(call: FakeModelCall) -> FakeReply | str:
    if call.call_index == 0 and "look up" in call.user_text:
        return FakeReply(tool_calls=[FakeToolCall(tool_name="lookup", arguments={"order_id": "7"})])
    if call.call_index == 0 and "address" in call.user_text:
        return FakeReply(
            tool_calls=[FakeToolCall(tool_name="change_address", arguments={"order_id": "7"})]
        )
    results = [part.model_response_str(wrap_if_error=False) for part in call.tool_returns()]
    return "Result: " + "; ".join(results)


async def build_flow(url: str) -> AgentSessionFlow:
    agent = Agent(FakeModel(script), tools=await source_tools(MCPToolSource.http(url)))
    return AgentSessionFlow(PydanticAIRunner(agent), flow_type=FLOW_TYPE)


if __name__ == "__main__":
    from dex_agents.testing import run_agent_worker

    run_agent_worker([asyncio.run(build_flow(os.environ[URL_ENV]))])
