"""Responses input items <-> stored framework messages, and run-state decoding.

A stored ``framework_item`` is exactly one ``TResponseInputItem`` as the SDK's
``RunResult.to_input_list()`` gives it: a plain JSON object, fed back unchanged as the
next turn's input.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, cast

from agents import (
    Agent,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
    RunState,
)
from agents.items import TResponseInputItem
from dex_agents import (
    AgentMessage,
    AgentToolCall,
    FrameworkMessage,
    MessageRole,
    build_turn_failure_note,
)


def user_message(text: str) -> FrameworkMessage:
    """Return the stored form of a user message: ``{"role": "user", "content": text}``."""
    item = {"role": "user", "content": text}
    return FrameworkMessage(role=MessageRole.USER, framework_item=item, text=text)


GUARDRAIL_NOTE_TYPE = "dex.guardrail_tripwire"
"""``type`` of the stored note of a turn a guardrail ended (never sent to the model)."""


def guardrail_note(
    exc: InputGuardrailTripwireTriggered | OutputGuardrailTripwireTriggered,
    records: Iterable[AgentToolCall] = (),
) -> FrameworkMessage:
    """The assistant message that tells the user a guardrail ended the turn.

    Its text is what a plain run raises (the exception's type and message) with the
    guardrail's name and ``output_info``; the item records the same as JSON. When tool
    calls of the turn already ran (an output guardrail after tools), the item also holds
    the session's turn-failure note for them, the one thing of the turn the model sees
    later, so it does not repeat a write.
    """
    result = exc.guardrail_result
    name = result.guardrail.get_name()
    kind = "input" if isinstance(exc, InputGuardrailTripwireTriggered) else "output"
    info = _plain_value(result.output.output_info)
    detail = "" if info is None else f" ({json.dumps(info, ensure_ascii=False)})"
    text = (
        f"{type(exc).__name__}: the {kind} guardrail {name!r} triggered its tripwire{detail}; "
        "the agent gives no answer to this message."
    )
    item = {
        "type": GUARDRAIL_NOTE_TYPE,
        "error": type(exc).__name__,
        "guardrail": name,
        "kind": kind,
        "output_info": info,
        "model_note": build_turn_failure_note(records) or None,
    }
    return FrameworkMessage(role=MessageRole.ASSISTANT, framework_item=item, text=text)


def _model_note(item: object) -> str | None:
    if not isinstance(item, Mapping) or item.get("type") != GUARDRAIL_NOTE_TYPE:
        return None
    note = item.get("model_note")
    return note if isinstance(note, str) and note else None


def _plain_value(value: object) -> Any:
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        value = dump(mode="json")
    return json.loads(json.dumps(value, default=str))


def input_items(messages: Iterable[AgentMessage]) -> list[TResponseInputItem]:
    """Rebuild the SDK input from stored messages, in sequence order.

    A turn a guardrail ended is left out, its user message included: a plain run raised
    there, and the conversation went on from the turn before. Only its note of tool calls
    that already ran, if any, stays (as a user message).

    Raises:
        ValueError: a stored item is not a JSON object (it was not written by this adapter).

    """
    messages = list(messages)
    tripped = {
        message.turn_id
        for message in messages
        if isinstance(message.framework_item, Mapping)
        and message.framework_item.get("type") == GUARDRAIL_NOTE_TYPE
    }
    items: list[TResponseInputItem] = []
    for message in messages:
        if message.turn_id in tripped:
            note = _model_note(message.framework_item)
            if note is not None:
                items.append({"role": "user", "content": note})
            continue
        item = message.framework_item
        if not isinstance(item, Mapping):
            raise ValueError(
                f"message {message.sequence} has no Responses input item: {item!r}; "
                "was the session started with another runner?"
            )
        items.append(cast(TResponseInputItem, dict(item)))
    return items


def framework_messages(items: Sequence[TResponseInputItem]) -> list[FrameworkMessage]:
    """Wrap new input items as ``FrameworkMessage`` s with their role and readable text."""
    return [_framework_message(_plain(item)) for item in items]


def _framework_message(item: dict[str, Any]) -> FrameworkMessage:
    kind = item.get("type")
    if kind == "function_call_output":
        return FrameworkMessage(
            role=MessageRole.TOOL, framework_item=item, text=_text(item.get("output"))
        )
    if item.get("role") == "user" and kind in (None, "message"):
        return FrameworkMessage(
            role=MessageRole.USER, framework_item=item, text=_text(item.get("content"))
        )
    if kind == "function_call":
        text = f"{item.get('name')}({item.get('arguments', '')})"
    elif kind == "reasoning":
        text = _text(item.get("summary"))
    else:
        text = _text(item.get("content"))
    return FrameworkMessage(role=MessageRole.ASSISTANT, framework_item=item, text=text)


def _plain(item: TResponseInputItem) -> dict[str, Any]:
    # to_input_list() gives JSON-ready dicts; a round trip drops anything that is not.
    return cast(dict[str, Any], json.loads(json.dumps(item, default=str)))


def _text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [_text(part.get("text")) for part in value if isinstance(part, Mapping)]
        return "".join(parts)
    return json.dumps(value, default=str)


def encode_run_state(state: RunState[Any, Any]) -> str:
    """Serialize the SDK's ``RunState`` as compact JSON (the ``framework_run_state``).

    A context object that is not a mapping is left out (it is rebuilt by the runner's
    ``context_factory`` on every step); a mapping context is stored by the SDK as is.
    """
    # to_string() indents; the same JSON without whitespace is about a third smaller.
    payload = state.to_json(context_serializer=_omit_context)
    return json.dumps(payload, separators=(",", ":"))


def _omit_context(_context: Any) -> Mapping[str, Any]:
    return {}


async def decode_run_state(
    agent: Agent[Any], encoded: str, *, context: Any
) -> RunState[Any, Agent[Any]]:
    """Restore a ``RunState`` for ``agent`` (same name and tools as when it was saved).

    Args:
        agent: the agent the state belongs to.
        encoded: the value :func:`encode_run_state` returned.
        context: the app context to continue with (it replaces the stored one).

    Raises:
        agents.exceptions.UserError: the state does not fit the agent or this SDK version.

    """
    override = RunContextWrapper(context=context)
    return await RunState.from_string(agent, encoded, context_override=override)
