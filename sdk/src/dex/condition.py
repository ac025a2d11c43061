"""The conditions a ``Wait`` combines: Channel, Timer and SubFlow conditions."""

from __future__ import annotations

from dex import (
    ChannelCondition,
    ConditionCombination,
    TimerCondition,
)
from dex._waits import Condition, SubFlowCondition

__all__ = [
    "ChannelCondition",
    "Condition",
    "ConditionCombination",
    "SubFlowCondition",
    "TimerCondition",
]
