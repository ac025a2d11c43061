"""A Flow's soft timeout (dex-model §2.6): one durable timer, and what it does when due.

The timer is the Wait of a pseudo execution ``sys:timeout_handler-1`` created with the run:
it shows among the active Steps, and ``skip_timer`` fires it early (index 0). When it is
due the policy decides: FAIL closes the run failed with ``FLOW_TIMEOUT``, CANCEL closes it
canceled, HANDLER turns the execution into an Execute-like invocation of
``Flow.handle_timeout`` on a Worker, which returns any decision. DEFAULT is resolved at
the start: HANDLER when the Flow overrides ``handle_timeout``, else FAIL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from dex._protocol import TIMEOUT_HANDLER_STEP, ConditionSpec, FlowTimeoutSpec, WaitSpec

__all__ = [
    "TIMEOUT_EXECUTION_ID",
    "TIMEOUT_HANDLER_STEP",
    "InvalidTimeoutError",
    "TimeoutClose",
    "check_timeout",
    "resolve_policy",
    "timeout_close",
    "timeout_wait",
]

TIMEOUT_EXECUTION_ID = f"{TIMEOUT_HANDLER_STEP}-1"
# the longest soft timeout taken (a century; beyond it the deadline loses meaning)
MAX_TIMEOUT_S = 100 * 365 * 86400.0

Policy = Literal["fail", "cancel", "handler"]


class InvalidTimeoutError(ValueError):
    """A Flow timeout no Flow can have; the message says which field and why."""


@dataclass(frozen=True)
class TimeoutClose:
    """How a FAIL or CANCEL timeout closes the run."""

    status: Literal["failed", "canceled"]
    error_type: str | None
    error_message: str


def check_timeout(spec: FlowTimeoutSpec) -> None:
    """Raise :class:`InvalidTimeoutError` unless ``timeout_s`` is finite and positive.

    The limit is ``MAX_TIMEOUT_S`` (100 years).
    """
    t = spec.timeout_s
    if not math.isfinite(t) or t <= 0:
        raise InvalidTimeoutError(f"StartFlowOptions.timeout must be positive, got {t}")
    if t > MAX_TIMEOUT_S:
        raise InvalidTimeoutError(
            f"StartFlowOptions.timeout is {t} s, over the limit max_flow_timeout_s={MAX_TIMEOUT_S}"
        )
    if spec.handler is not None and spec.policy not in ("default", "handler"):
        raise InvalidTimeoutError(
            "timeout_handler_options apply to the HANDLER policy only, "
            f"the policy is {spec.policy.upper()}"
        )


def resolve_policy(policy: str, *, has_handler: bool) -> Policy:
    """DEFAULT is HANDLER for a Flow that overrides ``handle_timeout``, else FAIL."""
    if policy == "default":
        return "handler" if has_handler else "fail"
    if policy in ("fail", "cancel", "handler"):
        return policy  # type: ignore[return-value]
    raise InvalidTimeoutError(f"unknown Flow timeout policy {policy!r}")


def timeout_wait(deadline: float) -> WaitSpec:
    """The Wait of the timeout's pseudo execution: one timer at the absolute ``deadline``."""
    return WaitSpec(
        mode="all",
        conditions=[
            ConditionSpec(kind="timer", condition_id=TIMEOUT_HANDLER_STEP, fire_at=deadline)
        ],
    )


def timeout_close(policy: Policy, timeout_s: float) -> TimeoutClose | None:
    """How a due timeout closes the run under ``policy`` (None: HANDLER runs instead)."""
    message = f"the Flow's soft timeout of {timeout_s:g} s passed"
    if policy == "fail":
        return TimeoutClose(status="failed", error_type="FLOW_TIMEOUT", error_message=message)
    if policy == "cancel":
        return TimeoutClose(status="canceled", error_type=None, error_message=message)
    return None
