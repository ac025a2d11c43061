"""Tool policies and session options."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, TypeAlias

import msgspec
from msgspec.structs import replace

from dex_agents._enums import ToolEffect

if TYPE_CHECKING:
    from dex_agents._records import AgentToolCall

MAX_MIN_APPROVALS = 10
DEFAULT_MAX_MODEL_CALLS_PER_TURN = 50


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
        framework_may_waive_approval: when True and ``requires_approval`` is None, the
            framework's own decision that a call needs no approval
            (``framework_requires_approval=False``) removes the effect's default approval;
            False (default) keeps the default. A framework's True always adds an approval,
            whatever this says. Beyond the seeds.

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
    framework_may_waive_approval: bool = False

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
        max_model_calls_per_turn: the most model calls (RunModel Steps that returned an
            outcome) one turn may make, counting every ``ToolCallsRequested`` and
            ``ContinueTurn``; the next one fails the turn with a ``turn_failed`` naming
            this limit instead of calling the model (default 50). It stops a framework
            that keeps handing off or retrying. Beyond the seeds.

    Raises:
        ValueError: ``agent_events_capacity_bytes``, ``interrupt_deadline`` or
            ``max_model_calls_per_turn`` is not positive.

    """

    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    default_tool_effect: ToolEffect = ToolEffect.UNCLASSIFIED
    agent_events_capacity_bytes: int = DEFAULT_AGENT_EVENTS_CAPACITY_BYTES
    interrupt_deadline: timedelta | None = None
    max_model_calls_per_turn: int = DEFAULT_MAX_MODEL_CALLS_PER_TURN

    def __post_init__(self) -> None:
        if self.agent_events_capacity_bytes <= 0:
            raise ValueError("agent_events_capacity_bytes must be positive")
        if self.interrupt_deadline is not None and self.interrupt_deadline <= timedelta(0):
            raise ValueError("interrupt_deadline must be positive")
        calls = self.max_model_calls_per_turn
        if isinstance(calls, bool) or not isinstance(calls, int):
            raise TypeError(f"max_model_calls_per_turn must be an int, got {calls!r}")
        if calls <= 0:
            raise ValueError(f"max_model_calls_per_turn must be positive, got {calls}")

    def resolve_tool_policy(
        self,
        tool_name: str,
        framework_effect: ToolEffect | None = None,
        *,
        framework_requires_approval: bool | None = None,
    ) -> ToolPolicy:
        """Pick a tool's policy: explicit policy, else framework metadata, else the default.

        ``framework_requires_approval`` is the framework's own approval decision for one
        call: its static "needs approval" flag, or its per-call approval function, which
        the adapter evaluates on the Worker inside RunModel when the call is deferred.
        None (default) leaves the policy as it is. Otherwise:

        - True adds an approval to any policy (an explicit ``requires_approval=False``
          included); ``min_approvals`` stays as the policy says.
        - False removes the effect's default approval only when the policy lets it: there
          is no explicit policy, or the explicit policy has ``requires_approval=None``,
          ``framework_may_waive_approval=True`` and ``min_approvals`` 1. An explicit
          ``requires_approval=True`` (or ``min_approvals`` above 1) is never waived.

        The result is what ``DeferredToolCall.policy`` should carry; ``is_approval_required``
        of it tells whether the call waits for a person.

        Raises:
            TypeError: ``framework_requires_approval`` is neither a bool nor None.

        """
        if framework_requires_approval is not None and not isinstance(
            framework_requires_approval, bool
        ):
            raise TypeError(
                "framework_requires_approval must be True, False or None, "
                f"got {framework_requires_approval!r}"
            )
        explicit = self.tool_policies.get(tool_name)
        policy = explicit or ToolPolicy(framework_effect or self.default_tool_effect)
        if framework_requires_approval is True:
            return (
                policy
                if policy.requires_approval is True
                else replace(policy, requires_approval=True)
            )
        if framework_requires_approval is False and _may_waive(explicit):
            return replace(policy, requires_approval=False)
        return policy


def _may_waive(explicit: ToolPolicy | None) -> bool:
    # Only a policy that leaves approval to its effect's default, and says a framework may
    # decide instead, gives way to the framework's "no approval needed".
    if explicit is None:
        return True
    return (
        explicit.requires_approval is None
        and explicit.framework_may_waive_approval
        and explicit.min_approvals == 1
    )
