"""dex-agents-claude-agent-sdk: run a Claude Agent SDK agent as a durable dex-agents session.

``ClaudeAgentRunner(options, tools=[...])`` takes the agent's ``ClaudeAgentOptions`` and
its custom ``@tool`` s; pass it to ``dex_agents.AgentSessionFlow``. Every model call is one
RunModel Step and every custom tool call its own tool Step; built-in CLI tools run inside
RunModel (at-least-once).
"""

from dex_agents_claude_agent_sdk._runner import (
    BUILTIN_APPROVED_OUTPUT,
    DEFAULT_SERVER_NAME,
    ONE_CALL_AT_A_TIME,
    ClaudeAgentRunner,
    ClaudeRunError,
    cli_session_id,
    tool_effect,
)
from dex_agents_claude_agent_sdk._transcript import RUN_STATE_FORMAT

__all__ = [
    "BUILTIN_APPROVED_OUTPUT",
    "DEFAULT_SERVER_NAME",
    "ONE_CALL_AT_A_TIME",
    "RUN_STATE_FORMAT",
    "ClaudeAgentRunner",
    "ClaudeRunError",
    "cli_session_id",
    "tool_effect",
]
