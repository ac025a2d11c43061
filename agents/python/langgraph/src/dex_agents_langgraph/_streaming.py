"""Forward a model call's text and reasoning deltas to the turn's event writer."""

from __future__ import annotations

from typing import Any

from dex_agents import AgentEventWriter
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage


def forward_message_chunk(events: AgentEventWriter, message: BaseMessage) -> None:
    """Write the text and reasoning of one streamed AI message (chunk) as deltas.

    The writer batches consecutive deltas (4 KiB or 50 ms per Stream message), so
    word-sized chunks are cheap. Other message types are ignored.
    """
    if not isinstance(message, AIMessageChunk | AIMessage):
        return
    for kind, text in _pieces(message):
        if kind == "reasoning":
            events.write_reasoning_delta(text)
        else:
            events.write_text_delta(text)


def _pieces(message: AIMessage) -> list[tuple[str, str]]:
    try:
        blocks: list[Any] = list(message.content_blocks)
    except Exception:  # a provider translator that cannot read this chunk
        return [("text", str(message.text))] if message.text else []
    pieces: list[tuple[str, str]] = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text" and block.get("text"):
            pieces.append(("text", str(block["text"])))
        elif kind == "reasoning" and block.get("reasoning"):
            pieces.append(("reasoning", str(block["reasoning"])))
        elif kind == "non_standard" and isinstance(block.get("value"), dict):
            # Anthropic-style thinking blocks from a message without a provider tag.
            value = block["value"]
            if value.get("type") == "thinking" and value.get("thinking"):
                pieces.append(("reasoning", str(value["thinking"])))
    return pieces
