"""Tool policies and session options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import msgspec

from dex_agents._enums import ToolEffect

DEFAULT_AGENT_EVENTS_CAPACITY_BYTES = 10 * 1024 * 1024


class ToolPolicy(msgspec.Struct, frozen=True):
    """How the session runs one tool: its effect class and whether it needs approval.

    Args:
        effect: what a repeat would do (see ``ToolEffect``).
        requires_approval: True or False to override; None (default) uses the effect's
            default, which ``is_approval_required`` reports: writes that are not
            idempotent and unclassified tools need approval, reads and idempotent writes
            do not.

    """

    effect: ToolEffect
    requires_approval: bool | None = None


def is_approval_required(policy: ToolPolicy) -> bool:
    """Whether a call under ``policy`` must be approved before it runs."""
    if policy.requires_approval is not None:
        return policy.requires_approval
    return not policy.effect.is_retryable


@dataclass(frozen=True)
class AgentSessionOptions:
    """Options of one ``AgentSessionFlow``.

    Args:
        tool_policies: explicit policies by tool name; they win over framework metadata.
        default_tool_effect: the effect of a tool with neither an explicit policy nor
            framework metadata (default ``UNCLASSIFIED``: one attempt, needs approval).
        agent_events_capacity_bytes: byte budget of the ``AgentEvents`` Stream (10 MiB).
        interrupt_deadline: how long an approval may wait before it expires as rejected;
            None (default) waits forever. Deadlines are Unix times on the Worker clock.

    Raises:
        ValueError: ``agent_events_capacity_bytes`` or ``interrupt_deadline`` is not
            positive.

    """

    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    default_tool_effect: ToolEffect = ToolEffect.UNCLASSIFIED
    agent_events_capacity_bytes: int = DEFAULT_AGENT_EVENTS_CAPACITY_BYTES
    interrupt_deadline: timedelta | None = None

    def __post_init__(self) -> None:
        if self.agent_events_capacity_bytes <= 0:
            raise ValueError("agent_events_capacity_bytes must be positive")
        if self.interrupt_deadline is not None and self.interrupt_deadline <= timedelta(0):
            raise ValueError("interrupt_deadline must be positive")

    def resolve_tool_policy(
        self, tool_name: str, framework_effect: ToolEffect | None = None
    ) -> ToolPolicy:
        """Pick a tool's policy: explicit policy, else framework metadata, else the default."""
        explicit = self.tool_policies.get(tool_name)
        if explicit is not None:
            return explicit
        return ToolPolicy(framework_effect or self.default_tool_effect)
