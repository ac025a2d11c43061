"""Per-Flow configuration: ``FlowConfig``."""

from __future__ import annotations

from dex import (
    ActiveStepSearchMode,
    FlowConfig,
    StepDurability,
    WorkerTarget,
)

__all__ = [
    "ActiveStepSearchMode",
    "FlowConfig",
    "StepDurability",
    "WorkerTarget",
]
