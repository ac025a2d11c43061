"""dex-agents-pydantic-ai: run an existing Pydantic AI agent as a durable dex-agents session.

``PydanticAIRunner(agent)`` attaches to the agent unchanged; pass it to
``dex_agents.AgentSessionFlow``. Every model call becomes one RunModel Step and every
function tool call its own Step (Pydantic AI's deferred tools). ``FakeModel`` is a
scripted, stateless model for tests.
"""

from dex_agents_pydantic_ai._fake_model import FakeModel, FakeModelCall, FakeReply, FakeToolCall
from dex_agents_pydantic_ai._items import RUN_STATE_FORMAT
from dex_agents_pydantic_ai._policies import (
    DEX_EFFECT_METADATA_KEY,
    framework_requires_approval,
    framework_tool_effect,
)
from dex_agents_pydantic_ai._runner import VALIDATION_RETRY, PydanticAIRunner
from dex_agents_pydantic_ai._sources import source_tools

__all__ = [
    "DEX_EFFECT_METADATA_KEY",
    "RUN_STATE_FORMAT",
    "VALIDATION_RETRY",
    "FakeModel",
    "FakeModelCall",
    "FakeReply",
    "FakeToolCall",
    "PydanticAIRunner",
    "framework_requires_approval",
    "framework_tool_effect",
    "source_tools",
]
