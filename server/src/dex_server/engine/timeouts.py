"""Timeout checks of one dispatched attempt."""

from __future__ import annotations

from typing import Literal

TimeoutKind = Literal["method", "heartbeat"]


def expired(
    *,
    now: float,
    deadline: float,
    last_frame_at: float,
    heartbeat_timeout_s: float | None,
) -> TimeoutKind | None:
    """Return which timeout an attempt has passed, if any.

    ``deadline`` is the absolute method deadline of the attempt. ``last_frame_at`` is when
    the last frame of the task arrived (its dispatch counts as the first frame).
    The method timeout wins when both passed.
    """
    if now >= deadline:
        return "method"
    if heartbeat_timeout_s is not None and now >= last_frame_at + heartbeat_timeout_s:
        return "heartbeat"
    return None
