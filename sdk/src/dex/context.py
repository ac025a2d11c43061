"""What a Step or RPC handler receives: ``Context``, ``AsyncContext``."""

from __future__ import annotations

from dex import (
    AsyncContext,
    Context,
    RecoveryErrorInfo,
)

__all__ = [
    "AsyncContext",
    "Context",
    "RecoveryErrorInfo",
]
