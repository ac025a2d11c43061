from __future__ import annotations

import pytest
from dex_agents import AgentEventType, ToolEffect
from langchain_core.messages import AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool

from dex_agents_langgraph import (
    DEX_EFFECT_KEY,
    FakeReply,
    FakeToolCall,
    ScriptedChatModel,
    tool_effect,
    with_effect,
)
from dex_agents_langgraph._streaming import forward_message_chunk
from tests.unit_helpers import Events


def make_tool(metadata: dict[str, object] | None) -> object:
    @tool
    def probe() -> str:
        """Probe."""
        return "ok"

    probe.metadata = metadata
    return probe


@pytest.mark.parametrize(
    ("metadata", "effect"),
    [
        (None, None),
        ({"readOnlyHint": True}, ToolEffect.READ),
        ({"idempotentHint": True}, ToolEffect.IDEMPOTENT_WRITE),
        ({"readOnlyHint": False}, ToolEffect.NON_IDEMPOTENT_WRITE),
        ({"annotations": {"readOnlyHint": True}}, ToolEffect.READ),
        ({DEX_EFFECT_KEY: "idempotent_write", "readOnlyHint": True}, ToolEffect.IDEMPOTENT_WRITE),
        ({"destructiveHint": True}, None),
    ],
)
def test_tool_metadata_maps_to_an_effect(
    metadata: dict[str, object] | None, effect: ToolEffect | None
) -> None:
    assert tool_effect(make_tool(metadata)) is effect  # type: ignore[arg-type]


def test_with_effect_marks_a_tool() -> None:
    marked = with_effect(make_tool({"x": 1}), ToolEffect.READ)  # type: ignore[arg-type]
    assert marked.metadata == {"x": 1, DEX_EFFECT_KEY: "read"}
    assert tool_effect(marked) is ToolEffect.READ
    with pytest.raises(ValueError):
        tool_effect(make_tool({DEX_EFFECT_KEY: "sometimes"}))  # type: ignore[arg-type]


async def test_text_and_reasoning_chunks_become_deltas() -> None:
    events = Events()
    forward_message_chunk(
        events.writer, AIMessageChunk(content="", additional_kwargs={"reasoning_content": "hm"})
    )
    forward_message_chunk(events.writer, AIMessageChunk(content="Hel"))
    forward_message_chunk(events.writer, AIMessageChunk(content="lo"))
    forward_message_chunk(
        events.writer,
        AIMessageChunk(
            content=[{"type": "thinking", "thinking": "deep"}, {"type": "text", "text": "!"}]
        ),
    )
    forward_message_chunk(events.writer, ToolMessage(content="ignored", tool_call_id="x"))
    seen = [(e.type, e.data["text"]) for e in await events.settle()]
    assert seen[:2] == [
        (AgentEventType.REASONING_DELTA, "hm"),
        (AgentEventType.TEXT_DELTA, "Hello"),
    ]
    assert seen[-1] == (AgentEventType.TEXT_DELTA, "!")


def test_the_fake_model_follows_a_turn_script_statelessly() -> None:
    model = ScriptedChatModel(
        script=[
            [FakeReply(tool_calls=[FakeToolCall(name="a"), FakeToolCall(name="b")]), "done"],
        ],
        default="later",
    )
    first = model.invoke([HumanMessage("hi")])
    assert [(c["name"], c["id"]) for c in first.tool_calls] == [
        ("a", "call_0_0_0"),
        ("b", "call_0_0_1"),
    ]
    results = [ToolMessage(content="1", tool_call_id="call_0_0_0", name="a")]
    assert model.invoke([HumanMessage("hi"), first, *results]).text == "done"
    # Asking again gives the same reply: nothing is counted inside the model.
    assert model.invoke([HumanMessage("hi")]).tool_calls == first.tool_calls
    assert model.invoke([HumanMessage("hi"), first, HumanMessage("next")]).text == "later"


async def test_the_fake_model_streams_tool_calls_and_usage() -> None:
    model = ScriptedChatModel(
        script=lambda call: FakeReply(
            text="two words", tool_calls=[FakeToolCall(name="a", args={"x": 1}, id="i1")]
        )
    )
    chunks = [c async for c in model.astream([HumanMessage("hi")])]
    assert [c.content for c in chunks if c.content] == ["two ", "words"]
    total = chunks[0]
    for chunk in chunks[1:]:
        total = total + chunk
    assert total.tool_calls == [{"name": "a", "args": {"x": 1}, "id": "i1", "type": "tool_call"}]
    assert total.usage_metadata is not None
    assert total.usage_metadata["output_tokens"] == 3


def test_a_script_without_a_reply_says_so() -> None:
    with pytest.raises(LookupError, match="turn 0, call 0"):
        ScriptedChatModel(script=[]).invoke([HumanMessage("hi")])
