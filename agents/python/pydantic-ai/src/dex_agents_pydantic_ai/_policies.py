"""Pydantic AI tool metadata -> dex-agents tool policies."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dex_agents import AgentTurnContext, ToolEffect, ToolPolicy
from pydantic_ai.tools import ToolDefinition

DEX_EFFECT_METADATA_KEY = "dex_effect"
"""``ToolDefinition.metadata`` key naming a tool's effect class (a ``ToolEffect`` value).

Set it on a tool to classify it without a ``ToolPolicy``:
``@agent.tool_plain(metadata={"dex_effect": "read"})``.
"""


def framework_tool_effect(tool_def: ToolDefinition | None) -> ToolEffect | None:
    """Return the effect a tool's own metadata declares, or None when it declares none.

    Checked in order: ``metadata["dex_effect"]`` (a ``ToolEffect`` value), then MCP
    annotations as Pydantic AI's MCP toolsets store them (``metadata["annotations"]`` with
    ``readOnlyHint`` -> ``READ``, ``idempotentHint`` -> ``IDEMPOTENT_WRITE``).

    Raises:
        ValueError: ``metadata["dex_effect"]`` is not a ``ToolEffect`` value.

    """
    if tool_def is None or not tool_def.metadata:
        return None
    metadata: Mapping[str, Any] = tool_def.metadata
    declared = metadata.get(DEX_EFFECT_METADATA_KEY)
    if declared is not None:
        return ToolEffect(str(declared))
    annotations = metadata.get("annotations")
    if isinstance(annotations, Mapping):
        if annotations.get("readOnlyHint") is True:
            return ToolEffect.READ
        if annotations.get("idempotentHint") is True:
            return ToolEffect.IDEMPOTENT_WRITE
    return None


def framework_requires_approval(tool_def: ToolDefinition | None) -> bool:
    """Whether Pydantic AI itself asks for approval (``requires_approval=True`` tools)."""
    return tool_def is not None and tool_def.kind == "unapproved"


def resolve_policy(
    turn: AgentTurnContext,
    tool_name: str,
    tool_def: ToolDefinition | None,
    toolset_decision: bool | None = None,
) -> ToolPolicy:
    """Resolve one deferred call's policy for a turn.

    The effect comes from an explicit ``ToolPolicy``, else the tool's metadata
    (:func:`framework_tool_effect`), else the session's default. Pydantic AI's own approval
    decision is passed as ``framework_requires_approval``: True for a tool declared
    ``requires_approval=True`` (or a call Pydantic AI itself held for approval), else
    ``toolset_decision``, what an ``ApprovalRequiredToolset``'s function answered for the
    call (None when no such toolset holds the tool).
    """
    decision = True if framework_requires_approval(tool_def) else toolset_decision
    return turn.resolve_tool_policy(
        tool_name, framework_tool_effect(tool_def), framework_requires_approval=decision
    )
