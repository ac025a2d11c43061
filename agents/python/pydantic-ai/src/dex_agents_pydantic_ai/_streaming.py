"""Pydantic AI stream events -> text and reasoning deltas on the turn's AgentEventWriter."""

from __future__ import annotations

from dex_agents import AgentEventWriter
from pydantic_ai.messages import (
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
)


def forward_stream_event(events: AgentEventWriter, event: object) -> None:
    """Write the text or reasoning an event carries; ignore every other event.

    A part's first chunk arrives in its ``PartStartEvent``, later chunks in
    ``PartDeltaEvent`` s. The writer batches consecutive chunks (4 KiB or 50 ms), so
    forwarding each provider chunk as it comes is cheap.
    """
    if isinstance(event, PartStartEvent):
        part = event.part
        if isinstance(part, TextPart) and part.content:
            events.write_text_delta(part.content)
        elif isinstance(part, ThinkingPart) and part.content:
            events.write_reasoning_delta(part.content)
    elif isinstance(event, PartDeltaEvent):
        delta = event.delta
        if isinstance(delta, TextPartDelta) and delta.content_delta:
            events.write_text_delta(delta.content_delta)
        elif isinstance(delta, ThinkingPartDelta) and delta.content_delta:
            events.write_reasoning_delta(delta.content_delta)
