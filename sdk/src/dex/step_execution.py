"""Identifiers of Step executions and Timers."""

from __future__ import annotations

from dex import (
    StepExecutionId,
    TimerId,
)

__all__ = [
    "StepExecutionId",
    "TimerId",
]
