"""Options of the Client's waits for a Step or an Attribute."""

from __future__ import annotations

from dex import (
    ErrorSubStatus,
    RequestTimeoutError,
    WaitForAttributeOptions,
    WaitForStepCompletionOptions,
)

__all__ = [
    "ErrorSubStatus",
    "RequestTimeoutError",
    "WaitForAttributeOptions",
    "WaitForStepCompletionOptions",
]
