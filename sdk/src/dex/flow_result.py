"""How a Flow ended: ``FlowResult``, ``StepCompletion``."""

from __future__ import annotations

from dex import (
    FlowErrorType,
    FlowResult,
    FlowStatus,
    StepCompletion,
)

__all__ = [
    "FlowErrorType",
    "FlowResult",
    "FlowStatus",
    "StepCompletion",
]
