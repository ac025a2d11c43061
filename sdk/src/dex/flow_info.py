"""What the server reports of a Flow: ``FlowInfo``, ``FlowStatus``, search pages."""

from __future__ import annotations

from dex import (
    FlowInfo,
    FlowStatus,
    HealthInfo,
    SearchFlowEntry,
    SearchFlowsPage,
    Value,
)

__all__ = [
    "FlowInfo",
    "FlowStatus",
    "HealthInfo",
    "SearchFlowEntry",
    "SearchFlowsPage",
    "Value",
]
