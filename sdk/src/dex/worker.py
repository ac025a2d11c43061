"""The blocking Worker: ``Worker``."""

from __future__ import annotations

from dex._worker import Worker

__all__ = ["Worker"]
