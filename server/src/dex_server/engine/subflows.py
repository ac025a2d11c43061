"""SubFlows: the child Flow ID rule, reuse decisions and the checks of a SubFlow condition.

A Step's ``wait_for`` may wait on child Flows (``SubFlow.run``). The server starts each
child in the commit that records the Wait. These functions decide, without I/O, which ID
the child gets and whether an existing run with that ID is attached to or replaced.
"""

from __future__ import annotations

from typing import Literal

from dex._protocol import WaitSpec

__all__ = [
    "InvalidSubFlowError",
    "ReuseAction",
    "check_subflows",
    "child_flow_id",
    "child_request_id",
    "reuse_action",
    "subflow_positions",
]

ReuseAction = Literal["start", "attach", "restart"]
"""``start`` a new run, ``attach`` to the existing one, or ``restart``: terminate the
running one and start a new run."""


class InvalidSubFlowError(ValueError):
    """A SubFlow condition the server cannot run; the message says why."""


def child_flow_id(parent_flow_id: str, execution_id: str, index: int) -> str:
    """The child's Flow ID: ``SubFlow:<parentFlowId>-<stepExecutionId>-<index>``.

    ``index`` counts the SubFlow conditions of the Wait (0-based, declaration order), so
    the same Step execution waiting again gets the same IDs (and the reuse policy decides).
    """
    return f"SubFlow:{parent_flow_id}-{execution_id}-{index}"


def child_request_id(parent_run_id: str, execution_id: str, index: int) -> str:
    """The internal start request ID: a start seen again with it always attaches."""
    return f"subflow/{parent_run_id}/{execution_id}/{index}"


def reuse_action(policy: str, previous_status: str | None, *, same_request: bool) -> ReuseAction:
    """What a SubFlow start does when its child Flow ID may already have a run.

    Args:
        policy: ``attach``, ``restart_if_previous_exits_abnormally`` (the default) or
            ``always_restart``.
        previous_status: the latest run's status (``None``: the ID has no run).
        same_request: the latest run was started by this same internal request.

    ``attach`` waits for the existing run whatever it did; the default attaches to a
    running or completed run and starts a new one after failed, canceled or terminated;
    ``always_restart`` starts a new run, terminating a running one first.
    """
    if previous_status is None:
        return "start"
    if same_request or policy == "attach":
        return "attach"
    running = previous_status == "running"
    if policy == "always_restart":
        return "restart" if running else "start"
    return "attach" if running or previous_status == "completed" else "start"


def subflow_positions(wait: WaitSpec) -> list[int]:
    """Positions in ``wait.conditions`` of its SubFlow conditions, declaration order."""
    return [i for i, c in enumerate(wait.conditions) if c.kind == "subflow"]


def check_subflows(wait: WaitSpec) -> None:
    """Refuse SubFlow conditions a Worker sent malformed.

    Raises:
        InvalidSubFlowError: a SubFlow condition without its start, or with a child
            ``flow_id`` / ``run_id`` set (only the server sets them).

    """
    for i in subflow_positions(wait):
        c = wait.conditions[i]
        if c.subflow is None:
            raise InvalidSubFlowError(f"SubFlow condition {i} does not say which Flow to start")
        if c.flow_id is not None or c.run_id is not None:
            raise InvalidSubFlowError(
                f"SubFlow condition {i} sets flow_id/run_id; the server chooses them"
            )
