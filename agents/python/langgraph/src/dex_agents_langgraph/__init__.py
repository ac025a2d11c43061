"""dex-agents-langgraph: run LangGraph / LangChain agents as durable dex-agents sessions.

Attach :class:`LangGraphRunner` to a compiled graph (for example one built with
``langchain.agents.create_agent``) and pass it to ``dex_agents.AgentSessionFlow``. Every
model call becomes a RunModel Step and every tool call its own Step with its policy.
:class:`ScriptedChatModel` is a scripted chat model for offline tests.
"""

from dex_agents_langgraph._fake_model import (
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    ScriptedChatModel,
)
from dex_agents_langgraph._items import RUN_STATE_FORMAT, RunStateError
from dex_agents_langgraph._policies import DEX_EFFECT_KEY, tool_effect, with_effect
from dex_agents_langgraph._runner import LangGraphRunner, TooManyModelCallsError
from dex_agents_langgraph._sources import source_tools

__all__ = [
    "DEX_EFFECT_KEY",
    "RUN_STATE_FORMAT",
    "FakeModelCall",
    "FakeReply",
    "FakeToolCall",
    "LangGraphRunner",
    "RunStateError",
    "ScriptedChatModel",
    "TooManyModelCallsError",
    "tool_effect",
    "with_effect",
    "source_tools",
]
