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

    The tool's own ``needs_approval`` is the framework's decision for the call:
    ``needs_approval=True``, or a function that returns True, adds an approval to any
    policy; a function that returns False removes the effect's default approval where the
    policy lets it (no explicit policy, or one with ``framework_may_waive_approval=True``).
    ``needs_approval=False`` is the SDK's default for every tool, so it decides nothing.
    """
    decision = await _needs_approval(tool, arguments, call_id, context) if tool else None
    return turn.resolve_tool_policy(
        tool_name, framework_effect(tool), framework_requires_approval=decision
    )


async def _needs_approval(
    tool: FunctionTool, arguments: str, call_id: str, context: Any
) -> bool | None:
    flag = tool.needs_approval
    if isinstance(flag, bool):
        return True if flag else None
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        return True  # arguments the function cannot read: a person decides
    decision: object = flag(RunContextWrapper(context=context), parsed, call_id)
    if inspect.isawaitable(decision):
        decision = await decision
    return bool(decision)
