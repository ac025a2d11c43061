"""Tool policies and session options."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, TypeAlias

import msgspec

from dex_agents._enums import ToolEffect

if TYPE_CHECKING:
    from dex_agents._records import AgentToolCall

MAX_MIN_APPROVALS = 10


class ReconcileResult(msgspec.Struct, frozen=True):
    """What a ``reconcile`` read-back found: ``ReconcileResult(succeeded, evidence)``.

    Attributes:
        succeeded: True when the write took effect, False when it did not.
        evidence: what the read-back saw (the model sees it), e.g. "refund RF-1042 exists".

    """

    succeeded: bool
    evidence: str


Reconciler: TypeAlias = Callable[
    ["AgentToolCall"], "ReconcileResult | None | Awaitable[ReconcileResult | None]"
]
"""A read-back for an ``outcome_unknown`` call: called with the call's record (its
arguments and idempotency key), on the Worker, in its own read Step (up to 3 attempts).
It returns a ``ReconcileResult``, or None when it cannot tell. It must only read."""

DEFAULT_AGENT_EVENTS_CAPACITY_BYTES = 10 * 1024 * 1024


class ToolPolicy(msgspec.Struct, frozen=True):
    """How the session runs one tool: its effect class and whether it needs approval.

    Args:
        effect: what a repeat would do (see ``ToolEffect``).
        requires_approval: True or False to override; None (default) uses the effect's
            default, which ``is_approval_required`` reports: writes that are not
            idempotent and unclassified tools need approval, reads and idempotent writes
            do not.
        min_approvals: distinct approvers needed before the call runs (default 1,
            at most 10); more than 1 implies approval is required. Beyond the seeds.
        reconcile: a read-back (``Reconciler``) the session runs in its own read Step
            when a call ends ``outcome_unknown``, before the next model call; None
            (default) leaves the outcome unknown. Beyond the seeds.
        await_reconciliation: when True, an unknown outcome that ``reconcile`` did not
            settle (or every unknown outcome, without ``reconcile``) waits for a person's
            ``reconcile_tool_call`` before the model is called again (default False).
            Beyond the seeds.

    Raises:
        ValueError: ``min_approvals`` is out of 1..10, or above 1 with
            ``requires_approval=False``.

    Only policies given in ``AgentSessionOptions.tool_policies`` can reconcile: the
    read-back Step looks the function up there by tool name.

    """

    effect: ToolEffect
    requires_approval: bool | None = None
    min_approvals: int = 1
    reconcile: Reconciler | None = None
    await_reconciliation: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.min_approvals, bool) or not isinstance(self.min_approvals, int):
            raise TypeError(f"min_approvals must be an int, got {self.min_approvals!r}")
        if not 1 <= self.min_approvals <= MAX_MIN_APPROVALS:
            raise ValueError(
                f"min_approvals must be 1..{MAX_MIN_APPROVALS} (MAX_MIN_APPROVALS), "
                f"got {self.min_approvals}"
            )
        if self.min_approvals > 1 and self.requires_approval is False:
            raise ValueError("min_approvals above 1 needs requires_approval True or None")
        if self.reconcile is not None and not callable(self.reconcile):
            raise TypeError(f"reconcile must be callable, got {self.reconcile!r}")


def is_approval_required(policy: ToolPolicy) -> bool:
    """Whether a call under ``policy`` must be approved before it runs."""
    if policy.requires_approval is not None:
        return policy.requires_approval
    if policy.min_approvals > 1:
        return True
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
            None (default) waits forever. Deadlines are measured on the server's clock
            (a server Timer expires them; the Worker's clock is never consulted).

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
