"""LangChain messages <-> stored framework items, and the run state's encoding."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dex_agents import (
    AgentMessage,
    AgentToolCall,
    FrameworkMessage,
    MessageRole,
    ToolCallStatus,
    describe_tool_call_outcome,
)
from langchain_core.messages import (
    AIMessage,
    BaseMessage,
    HumanMessage,
    ToolMessage,
    message_to_dict,
    messages_from_dict,
)
from langchain_core.messages.tool import ToolCall
from langgraph.checkpoint.base import Checkpoint, CheckpointMetadata
from langgraph.checkpoint.serde.base import SerializerProtocol

RUN_STATE_FORMAT = "dex-langgraph/1"
_ROLES = {"human": MessageRole.USER, "ai": MessageRole.ASSISTANT, "tool": MessageRole.TOOL}


class RunStateError(ValueError):
    """The stored run state does not fit this turn or this version of the adapter."""


# --------------------------------------------------------------------------- messages


def to_framework_message(message: BaseMessage) -> FrameworkMessage:
    """Convert one LangChain message to the item the session stores."""
    role = _ROLES.get(message.type, MessageRole.SYSTEM)
    return FrameworkMessage(
        role=role, framework_item=message_to_dict(message), text=str(message.text)
    )


def from_stored(messages: Sequence[AgentMessage]) -> list[BaseMessage]:
    """Rebuild the conversation from stored items.

    Messages without an ID get ``"dex-msg-<sequence>"`` so every step rebuilds the very
    same messages (LangGraph's ``add_messages`` would give them random IDs otherwise).
    """
    rebuilt: list[BaseMessage] = []
    for stored in messages:
        item = stored.framework_item
        if not isinstance(item, dict) or "type" not in item or "data" not in item:
            raise RunStateError(f"message {stored.sequence} is not a LangChain message item")
        message = messages_from_dict([item])[0]
        if not message.id:
            message.id = f"dex-msg-{stored.sequence}"
        rebuilt.append(message)
    return rebuilt


def pending_tool_calls(messages: Sequence[BaseMessage]) -> list[ToolCall]:
    """Tool calls of the last AI message that no tool message after it answers yet."""
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, AIMessage):
            return [c for c in message.tool_calls if c.get("id") not in answered]
        if isinstance(message, ToolMessage):
            answered.add(message.tool_call_id)
    return []


def with_approved_arguments(
    messages: Sequence[BaseMessage], records: Mapping[str, AgentToolCall]
) -> AIMessage | None:
    """The last AI message with each edited call's arguments replaced, or None if none was.

    An approver's edit is shown to the model as the call it made: the record keeps the
    proposed arguments.
    """
    last = next((m for m in reversed(messages) if isinstance(m, AIMessage)), None)
    if last is None:
        return None
    changed = False
    calls: list[ToolCall] = []
    for call in last.tool_calls:
        record = records.get(call.get("id") or "")
        if record is not None and record.arguments_edited:
            call = {**call, "args": json.loads(record.arguments)}
            changed = True
        calls.append(call)
    return last.model_copy(update={"tool_calls": calls}) if changed else None


def tool_result_message(call: ToolCall, record: AgentToolCall) -> ToolMessage:
    """The tool message the model sees for a final record.

    Anything but success goes through LangChain's error channel (``status="error"``),
    which is also how its own human-in-the-loop middleware reports a rejection; the
    rejection reason is part of the text.
    """
    ok = record.status is ToolCallStatus.SUCCEEDED
    return ToolMessage(
        content=describe_tool_call_outcome(record),
        tool_call_id=record.tool_call_id,
        name=call["name"],
        status="success" if ok else "error",
    )


def tool_output_text(content: Any) -> str:
    """Render a tool message's content as the text the session records."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(
        isinstance(b, dict) and b.get("type") == "text" for b in content
    ):
        return "".join(str(b.get("text", "")) for b in content)
    return json.dumps(content, default=str)


# --------------------------------------------------------------------------- run state


@dataclass(frozen=True, kw_only=True)
class RunState:
    """What continues a turn after its tool Steps.

    Attributes:
        checkpoint: the thread's latest LangGraph checkpoint, with the messages that
            were stored before the turn's model calls cut out of the ``messages`` channel.
        metadata: the checkpoint's metadata.
        writes: its pending writes as ``(task_id, channel, value)``.
        prefix_count: how many stored messages were cut (they are restored from the
            session's messages).
        prefix_last_id: the ID of the last cut message, to detect a mismatch.
        tool_nodes: the tool nodes the graph (or an agent node of it) stopped before, or
            empty when it stopped at ``interrupt()`` calls or before another model node.
        subgraphs: the latest checkpoint of each agent node's own namespace, as
            ``(checkpoint_ns, checkpoint, metadata, writes)``.

    """

    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    writes: list[tuple[str, str, Any]]
    prefix_count: int
    prefix_last_id: str | None
    tool_nodes: list[str]
    subgraphs: list[tuple[str, Checkpoint, CheckpointMetadata, list[tuple[str, str, Any]]]] = field(
        default_factory=list
    )


def cut_prefix(
    checkpoint: Checkpoint, prefix: Sequence[BaseMessage], messages_key: str
) -> Checkpoint:
    """Return a copy of ``checkpoint`` without the stored messages at the channel's start."""
    values = dict(checkpoint["channel_values"])
    current = list(values.get(messages_key) or [])
    head = current[: len(prefix)]
    if [m.id for m in head] != [m.id for m in prefix]:
        raise RunStateError(
            "the graph changed messages stored before this turn; the adapter supports only "
            "graphs that append to the messages channel"
        )
    values[messages_key] = current[len(prefix) :]
    copied = dict(checkpoint)
    copied["channel_values"] = values
    return copied  # type: ignore[return-value]


def restore_prefix(
    checkpoint: Checkpoint, prefix: Sequence[BaseMessage], messages_key: str
) -> Checkpoint:
    """Return a copy of ``checkpoint`` with the stored messages put back at the start."""
    values = dict(checkpoint["channel_values"])
    values[messages_key] = [*prefix, *(values.get(messages_key) or [])]
    copied = dict(checkpoint)
    copied["channel_values"] = values
    return copied  # type: ignore[return-value]


def encode_run_state(state: RunState, serde: SerializerProtocol) -> str:
    """Encode the run state as JSON text (the checkpoint itself as base64 msgpack)."""
    kind, data = serde.dumps_typed(
        {
            "checkpoint": state.checkpoint,
            "metadata": state.metadata,
            "writes": state.writes,
            "subgraphs": [list(entry) for entry in state.subgraphs],
        }
    )
    return json.dumps(
        {
            "format": RUN_STATE_FORMAT,
            "prefix_count": state.prefix_count,
            "prefix_last_id": state.prefix_last_id,
            "tool_nodes": state.tool_nodes,
            "serde": kind,
            "data": base64.b64encode(data).decode("ascii"),
        },
        separators=(",", ":"),
    )


def decode_run_state(text: str, serde: SerializerProtocol) -> RunState:
    """Decode :func:`encode_run_state`'s output.

    Raises:
        RunStateError: the text is not a run state of this format.

    """
    try:
        raw = json.loads(text)
        if raw.get("format") != RUN_STATE_FORMAT:
            raise RunStateError(f"unknown run state format {raw.get('format')!r}")
        bundle = serde.loads_typed((raw["serde"], base64.b64decode(raw["data"])))
        return RunState(
            checkpoint=bundle["checkpoint"],
            metadata=bundle["metadata"],
            writes=[tuple(w) for w in bundle["writes"]],
            prefix_count=int(raw["prefix_count"]),
            prefix_last_id=raw["prefix_last_id"],
            tool_nodes=list(raw["tool_nodes"]),
            subgraphs=[
                (ns, checkpoint, metadata, [tuple(w) for w in writes])
                for ns, checkpoint, metadata, writes in bundle.get("subgraphs", [])
            ],
        )
    except RunStateError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise RunStateError(f"cannot decode the LangGraph run state: {error}") from error


CARRIED_STATE_KEY = "dex_langgraph_state"


def with_carried_state(
    produced: list[FrameworkMessage], values: Mapping[str, Any], serde: SerializerProtocol
) -> list[FrameworkMessage]:
    """Attach the graph's other state values to the turn's last stored item.

    The session stores only messages; keeping the rest (custom ``state_schema`` fields a
    ``Command`` updated, say) next to them lets the next turn start from the state a
    checkpointed LangGraph thread would have.
    """
    if not values or not produced:
        return produced
    kind, data = serde.dumps_typed(dict(values))
    last = produced[-1]
    item = dict(last.framework_item)
    item[CARRIED_STATE_KEY] = {"serde": kind, "data": base64.b64encode(data).decode("ascii")}
    return [*produced[:-1], FrameworkMessage(role=last.role, framework_item=item, text=last.text)]


def carried_state(
    messages: Sequence[AgentMessage], keys: set[str], serde: SerializerProtocol
) -> dict[str, Any]:
    """The state values the latest turn attached with :func:`with_carried_state`."""
    if not keys:
        return {}
    for stored in reversed(messages):
        item = stored.framework_item
        if isinstance(item, dict) and isinstance(item.get(CARRIED_STATE_KEY), dict):
            raw = item[CARRIED_STATE_KEY]
            try:
                values = serde.loads_typed((raw["serde"], base64.b64decode(raw["data"])))
            except (ValueError, KeyError, TypeError) as error:
                raise RunStateError(f"cannot decode the carried graph state: {error}") from error
            return {k: v for k, v in dict(values).items() if k in keys}
    return {}


def human_item(text: str) -> FrameworkMessage:
    """The stored item of a user message."""
    return to_framework_message(HumanMessage(content=text))
