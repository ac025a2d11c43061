"""LangChain tool metadata -> the framework effect dex-agents resolves policies from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dex_agents import ToolEffect
from langchain_core.tools import BaseTool

DEX_EFFECT_KEY = "dex_effect"


def tool_effect(tool: BaseTool | None) -> ToolEffect | None:
    """Return the effect a LangChain tool's metadata declares, or None.

    In order of precedence:

    * ``metadata["dex_effect"]``: a ``ToolEffect`` or its value (``"read"``, ...);
    * MCP annotations, as ``langchain-mcp-adapters`` flattens them into ``metadata``
      (also accepted nested under ``metadata["annotations"]``): ``readOnlyHint=True``
      gives ``READ``; ``idempotentHint=True`` gives ``IDEMPOTENT_WRITE``;
      ``readOnlyHint=False`` alone gives ``NON_IDEMPOTENT_WRITE``.

    An explicit ``ToolPolicy`` in ``AgentSessionOptions.tool_policies`` wins over all of
    these; a tool with no marker gets the session's ``default_tool_effect``.

    Raises:
        ValueError: ``dex_effect`` is not a ``ToolEffect`` value.

    """
    if tool is None or not tool.metadata:
        return None
    metadata: Mapping[str, Any] = tool.metadata
    marker = metadata.get(DEX_EFFECT_KEY)
    if marker is not None:
        return ToolEffect(marker)
    nested = metadata.get("annotations")
    hints: Mapping[str, Any] = nested if isinstance(nested, Mapping) else metadata
    if hints.get("readOnlyHint") is True:
        return ToolEffect.READ
    if hints.get("idempotentHint") is True:
        return ToolEffect.IDEMPOTENT_WRITE
    if hints.get("readOnlyHint") is False:
        return ToolEffect.NON_IDEMPOTENT_WRITE
    return None


def with_effect(tool: BaseTool, effect: ToolEffect) -> BaseTool:
    """Mark ``tool`` with ``effect`` in its metadata and return it (for chaining).

    Use it on tools defined with ``@tool``: ``lookup = with_effect(lookup, ToolEffect.READ)``.
    It changes the tool object in place.
    """
    tool.metadata = {**(tool.metadata or {}), DEX_EFFECT_KEY: effect.value}
    return tool
