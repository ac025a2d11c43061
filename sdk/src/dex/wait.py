"""What ``wait_for`` returns: ``Wait``."""

from __future__ import annotations

from dex import (
    ConditionCombination,
    Wait,
)
from dex._waits import WaitKind

__all__ = [
    "ConditionCombination",
    "Wait",
    "WaitKind",
]
