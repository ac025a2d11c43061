"""Forward a streamed run's raw model deltas to the turn's ``AgentEventWriter``."""

from __future__ import annotations

from collections.abc import Callable

from agents import AgentUpdatedStreamEvent, RawResponsesStreamEvent, RunResultStreaming
from dex_agents import AgentEventWriter

TEXT_DELTA_TYPES = frozenset({"response.output_text.delta", "response.refusal.delta"})
REASONING_DELTA_TYPES = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)


async def forward_deltas(
    result: RunResultStreaming,
    events: AgentEventWriter,
    on_agent_updated: Callable[[], None] | None = None,
) -> None:
    """Consume ``result.stream_events()`` and write its text and reasoning deltas.

    The writer batches consecutive deltas (4 KiB or 50 ms per Stream message), so each
    provider token is not its own Stream message. ``on_agent_updated`` is called at each
    agent change (the run's start, and every handoff); the SDK waits for it before it
    goes on, so it may cancel the run there. Every other SDK event is skipped: tool calls
    and results reach the AgentEvents Stream from the session's own Steps.
    """
    async for event in result.stream_events():
        if isinstance(event, AgentUpdatedStreamEvent) and on_agent_updated is not None:
            on_agent_updated()
            continue
        if not isinstance(event, RawResponsesStreamEvent):
            continue
        data = event.data
        kind = getattr(data, "type", "")
        delta = getattr(data, "delta", None)
        if not isinstance(delta, str):
            continue
        if kind in TEXT_DELTA_TYPES:
            events.write_text_delta(delta)
        elif kind in REASONING_DELTA_TYPES:
            events.write_reasoning_delta(delta)
