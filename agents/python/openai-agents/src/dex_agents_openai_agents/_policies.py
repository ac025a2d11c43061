"""OpenAI Agents SDK tool metadata -> dex-agents tool policies."""

from __future__ import annotations

import inspect
import json
from typing import Any

from agents import FunctionTool, RunContextWrapper
from dex_agents import AgentTurnContext, ToolEffect, ToolPolicy

from dex_agents_openai_agents._sources import SourceFunctionTool


def framework_effect(tool: FunctionTool | None) -> ToolEffect | None:
    """Return the effect a tool's own metadata declares, or None when it declares none.

    Tools converted from MCP servers carry MCP annotations: ``readOnlyHint`` gives
    ``READ``, ``idempotentHint`` gives ``IDEMPOTENT_WRITE``. Plain function tools carry
    none, so explicit ``tool_policies`` or the session's default decide.
    """
    if tool is None:
        return None
    if isinstance(tool, SourceFunctionTool):
        return tool.dex_effect
    annotations = tool.mcp_annotations
    if annotations is None:
        return None
    if _hint(annotations, "read_only_hint", "readOnlyHint"):
        return ToolEffect.READ
    if _hint(annotations, "idempotent_hint", "idempotentHint"):
        return ToolEffect.IDEMPOTENT_WRITE
    return None


def _hint(annotations: object, *names: str) -> bool:
    # MCP SDK releases name these fields in snake case or camel case.
    return any(getattr(annotations, name, None) is True for name in names)


async def resolve_policy(
    turn: AgentTurnContext,
    tool: FunctionTool | None,
    tool_name: str,
    arguments: str,
    call_id: str,
    context: Any,
) -> ToolPolicy:
    """Return a call's policy: explicit policy, else the tool's metadata, else the default.

    The SDK's own ``needs_approval`` (a bool, or a function of the call) also makes a call
    need approval, unless an explicit ``tool_policies`` entry decides it.
    """
    policy = turn.resolve_tool_policy(tool_name, framework_effect(tool))
    if tool is None or tool_name in turn.options.tool_policies:
        return policy
    if await _needs_approval(tool, arguments, call_id, context):
        return ToolPolicy(policy.effect, requires_approval=True)
    return policy


async def _needs_approval(tool: FunctionTool, arguments: str, call_id: str, context: Any) -> bool:
    flag = tool.needs_approval
    if isinstance(flag, bool):
        return flag
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return True
    decision: object = flag(RunContextWrapper(context=context), parsed, call_id)
    if inspect.isawaitable(decision):
        decision = await decision
    return bool(decision)
