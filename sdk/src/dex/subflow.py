"""Child Flows: ``SubFlow``."""

from __future__ import annotations

from dex import (
    Context,
    Flow,
    FlowResult,
    SubFlow,
    SubFlowOptions,
)

__all__ = [
    "Context",
    "Flow",
    "FlowResult",
    "SubFlow",
    "SubFlowOptions",
]
