from __future__ import annotations

from typing import Any, cast

import mcp_types
from dex_agents import ToolEffect, ToolInputAnswer
from dex_agents._mcp import _AnswerReplay, effect_of_annotations, question_key


def form(message: str, field: str = "street") -> mcp_types.ElicitRequestFormParams:
    schema = {"type": "object", "properties": {field: {"type": "string"}}, "required": [field]}
    return mcp_types.ElicitRequestFormParams(message=message, requested_schema=schema)


def test_annotations_map_to_effects() -> None:
    hints = mcp_types.ToolAnnotations
    assert effect_of_annotations(None) is None
    assert effect_of_annotations(hints(read_only_hint=True)) is ToolEffect.READ
    assert effect_of_annotations(hints(idempotent_hint=True)) is ToolEffect.IDEMPOTENT_WRITE
    assert effect_of_annotations(hints(read_only_hint=True, idempotent_hint=True)) is (
        ToolEffect.READ
    )
    assert effect_of_annotations(hints(read_only_hint=False, destructive_hint=True)) is None
    assert effect_of_annotations(hints(idempotent_hint=False)) is None


def test_question_keys_depend_on_message_and_schema_only() -> None:
    assert question_key(form("Where to?")) == question_key(form("Where to?"))
    assert question_key(form("Where to?")) != question_key(form("Where else?"))
    assert question_key(form("Where to?")) != question_key(form("Where to?", "city"))


async def test_recorded_answers_are_replayed_per_question_in_order() -> None:
    where, why = form("Where to?"), form("Why?", "reason")
    answers = [
        ToolInputAnswer(key=question_key(where), action="accept", content={"street": "A"}),
        ToolInputAnswer(key=question_key(why), action="decline"),
        ToolInputAnswer(key=question_key(where), action="accept", content={"street": "B"}),
    ]
    replay = _AnswerReplay(answers)
    context = cast(Any, None)
    # The server asks "Why?" first this time: answers match by question, not position.
    first = await replay.answer(context, why)
    assert isinstance(first, mcp_types.ElicitResult)
    assert (first.action, first.content) == ("decline", None)
    second = await replay.answer(context, where)
    third = await replay.answer(context, where)
    assert isinstance(second, mcp_types.ElicitResult)
    assert isinstance(third, mcp_types.ElicitResult)
    assert [second.content, third.content] == [{"street": "A"}, {"street": "B"}]
    assert replay.unanswered is None
    # A question asked once more than answered waits for a person.
    refused = await replay.answer(context, where)
    assert isinstance(refused, mcp_types.ErrorData)
    assert replay.unanswered is not None
    assert replay.unanswered.key == question_key(where)
    assert replay.unanswered.message == "Where to?"
    assert replay.unanswered.requested_schema == dict(where.requested_schema)
