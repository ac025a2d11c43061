"""SubFlow options: how a Step's ``wait_for`` starts a child Flow."""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dex._client._options import FlowTimeoutHandlerOptions, FlowTimeoutPolicy
from dex._flow_config import FlowConfig
from dex._options import Duration, RetryPolicy

if TYPE_CHECKING:
    from dex._state import Attribute, AttributeMap

__all__ = ["SubFlowOptions", "SubFlowReusePolicy"]


class SubFlowReusePolicy(enum.Enum):
    """What ``SubFlow.run`` does when the child Flow ID already has a run (SubFlows)."""

    ATTACH = "attach"
    """Wait for the existing run, whatever its outcome."""
    RESTART_IF_PREVIOUS_EXITS_ABNORMALLY = "restart_if_previous_exits_abnormally"
    """Start a new run unless the previous one completed (default)."""
    ALWAYS_RESTART = "always_restart"
    """Always start a new run."""


@dataclass(frozen=True, slots=True)
class SubFlowOptions:
    """How ``SubFlow.run`` starts a child Flow (SubFlows).

    The fields mirror ``StartFlowOptions`` plus ``reuse_policy`` (what to do when the
    child ID already has a run) and ``condition_id`` (the id of the condition in the
    parent's Wait). ``start_delay``, ``with_attribute`` and the soft timeout (``timeout``,
    ``timeout_policy``, ``timeout_handler_options``, as for a Flow) apply to the child's
    start. The child inherits its parent's FlowConfig; ``config_override`` replaces the
    fields it sets. ``retry_policy`` and a listening ``config_override.worker_target`` are
    not run by this server: a Wait whose child sets one fails its attempt (not retried)
    with ``FEATURE_NOT_AVAILABLE`` naming it, and no child starts. Immutable; safe to
    share between threads.
    """

    timeout: Duration | None = None
    timeout_policy: FlowTimeoutPolicy = FlowTimeoutPolicy.DEFAULT
    timeout_handler_options: FlowTimeoutHandlerOptions | None = None
    start_delay: Duration | None = None
    retry_policy: RetryPolicy | None = None
    _attribute_initializations: tuple[tuple[Any, tuple[object, ...]], ...] = ()
    config_override: FlowConfig | None = None
    reuse_policy: SubFlowReusePolicy = SubFlowReusePolicy.RESTART_IF_PREVIOUS_EXITS_ABNORMALLY
    condition_id: str | None = None

    def with_attribute(
        self, attribute: Attribute[Any] | AttributeMap[Any], /, *args: object
    ) -> SubFlowOptions:
        """Return a copy that also sets an initial value of the child's ``attribute``.

        ``with_attribute(attr, value)`` for an Attribute, ``with_attribute(amap, key,
        value)`` for an AttributeMap instance.
        """
        entry = (attribute, tuple(args))
        return dataclasses.replace(
            self, _attribute_initializations=(*self._attribute_initializations, entry)
        )
