"""The live test's agent on a real provider, served by a Worker child of test_live."""

from __future__ import annotations

import os
from pathlib import Path

from dex_agents import AgentSessionFlow, AgentSessionOptions, current_tool_execution
from dex_agents.testing import InvocationLog, run_agent_worker
from pydantic_ai import Agent

from dex_agents_pydantic_ai import PydanticAIRunner

LOG_ENV = "PYDANTIC_AI_LIVE_LOG"


def live_model_name() -> str | None:
    """The provider model to use, or None when no API key is set."""
    if os.environ.get("DEX_LIVE_MODEL"):
        return os.environ["DEX_LIVE_MODEL"]
    if os.environ.get("OPENAI_API_KEY"):
        return "openai:gpt-4o-mini"
    if os.environ.get("ANTHROPIC_API_KEY"):
        return "anthropic:claude-3-5-haiku-latest"
    return None


def lookup_order(order_id: int) -> dict[str, object]:
    """Look up an order by its number."""
    execution = current_tool_execution()
    key = execution.idempotency_key if execution else "outside-a-step"
    InvocationLog(Path(os.environ[LOG_ENV])).record("tool:lookup_order", key)
    return {"order_id": order_id, "item": "espresso machine", "status": "delivered"}


def build_flow() -> AgentSessionFlow:
    model = live_model_name()
    assert model is not None
    agent = Agent(
        model,
        instructions="You are a support-desk agent. Always look orders up with the tool.",
        tools=[lookup_order],
    )
    return AgentSessionFlow(
        PydanticAIRunner(agent),
        flow_type="PydanticAiLiveDesk",
        options=AgentSessionOptions(),
    )


if __name__ == "__main__":
    run_agent_worker([build_flow()])
