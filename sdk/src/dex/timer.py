"""Durable Timers: ``Timer``."""

from __future__ import annotations

from dex import (
    Timer,
)

__all__ = [
    "Timer",
]
