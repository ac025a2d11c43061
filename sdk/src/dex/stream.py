"""Streams, their messages and buffered text writers."""

from __future__ import annotations

from dex import (
    AsyncBufferedTextStream,
    BufferedTextStream,
    StepOutput,
    Stream,
    StreamMessage,
    StreamMessagesPage,
)

__all__ = [
    "AsyncBufferedTextStream",
    "BufferedTextStream",
    "StepOutput",
    "Stream",
    "StreamMessage",
    "StreamMessagesPage",
]
