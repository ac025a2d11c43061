"""dex-agents-openai-agents: run an OpenAI Agents SDK agent as a durable dex-agents session.

``OpenAIAgentsRunner(agent)`` attaches to an existing ``agents.Agent``; pass it to
``dex_agents.AgentSessionFlow``. Every model call is a RunModel Step and every function
tool call its own Step. ``FakeModel`` is a scripted ``agents.Model`` for offline tests.
"""

from dex_agents_openai_agents._fake_model import (
    FakeModel,
    FakeModelRequest,
    FakeResponse,
    FakeScript,
    FakeToolCall,
)
from dex_agents_openai_agents._guard import SecondModelCallError
from dex_agents_openai_agents._policies import framework_effect
from dex_agents_openai_agents._runner import DEFAULT_MAX_TURNS, OpenAIAgentsRunner
from dex_agents_openai_agents._sources import SourceFunctionTool, source_tools

__all__ = [
    "DEFAULT_MAX_TURNS",
    "FakeModel",
    "FakeModelRequest",
    "FakeResponse",
    "FakeScript",
    "FakeToolCall",
    "OpenAIAgentsRunner",
    "SecondModelCallError",
    "framework_effect",
    "source_tools",
    "SourceFunctionTool",
]
