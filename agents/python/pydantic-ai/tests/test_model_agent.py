"""An agent on Pydantic AI's own ``TestModel``, served by a Worker child of test_turns."""

from __future__ import annotations

import os
from pathlib import Path

from dex_agents import AgentSessionFlow, AgentSessionOptions, ToolEffect
from dex_agents.testing import run_agent_worker
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from dex_agents_pydantic_ai import PydanticAIRunner


def get_weather(city: str) -> str:
    """Return the weather in a city."""
    log = os.environ.get("TEST_MODEL_LOG")
    if log:
        with Path(log).open("a") as file:
            file.write("get_weather\n")
    return f"sunny in {city}"


def build_flow() -> AgentSessionFlow:
    agent = Agent(TestModel(), instructions="Answer about the weather.", tools=[get_weather])
    return AgentSessionFlow(
        PydanticAIRunner(agent),
        flow_type="PydanticAiTestModel",
        options=AgentSessionOptions(default_tool_effect=ToolEffect.READ),
    )


if __name__ == "__main__":
    run_agent_worker([build_flow()])
