"""Framework items <-> Pydantic AI messages, and the run state between model calls."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from dex_agents import (
    AgentMessage,
    AgentToolCall,
    AgentUsage,
    FrameworkMessage,
    MessageRole,
    ToolCallStatus,
    describe_tool_call_outcome,
)
from pydantic_ai.exceptions import ToolFailed
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import DeferredToolResults, ToolDenied

RUN_STATE_FORMAT = "dex-pydantic-ai/2"
_OLDER_FORMATS = ("dex-pydantic-ai/1",)


def dump_message(message: ModelMessage) -> dict[str, Any]:
    """Return one message as a JSON-compatible dict (the stored ``framework_item``)."""
    dumped: list[dict[str, Any]] = ModelMessagesTypeAdapter.dump_python([message], mode="json")
    return dumped[0]


def load_messages(items: Iterable[Any]) -> list[ModelMessage]:
    """Validate stored ``framework_item`` s back into Pydantic AI messages."""
    return list(ModelMessagesTypeAdapter.validate_python(list(items)))


def history_of(messages: Sequence[AgentMessage]) -> list[ModelMessage]:
    """Rebuild the model history from stored messages, in sequence order.

    A stored ``system`` message holds the system prompt parts Pydantic AI put in front of
    the user prompt of the session's first request (it is stored after that user message,
    which the session wrote first); it goes back in front of that request's parts, so the
    model sees the request exactly as a plain Pydantic AI run sends it.
    """
    rebuilt: list[ModelMessage] = []
    for stored, message in zip(
        messages, load_messages(m.framework_item for m in messages), strict=True
    ):
        previous = rebuilt[-1] if rebuilt else None
        if (
            stored.role is MessageRole.SYSTEM
            and isinstance(message, ModelRequest)
            and isinstance(previous, ModelRequest)
        ):
            rebuilt[-1] = replace(previous, parts=[*message.parts, *previous.parts])
        else:
            rebuilt.append(message)
    return rebuilt


def system_message(request: ModelRequest) -> FrameworkMessage | None:
    """The system prompt parts of a turn's request as a stored ``system`` message, if any."""
    parts = [part for part in request.parts if isinstance(part, SystemPromptPart)]
    if not parts:
        return None
    item = dump_message(ModelRequest(parts=list(parts)))
    return FrameworkMessage(
        role=MessageRole.SYSTEM, framework_item=item, text="\n".join(p.content for p in parts)
    )


def role_of(message: ModelMessage) -> MessageRole:
    """Map a message to a stored role: responses are the assistant's, tool returns the tool's."""
    if isinstance(message, ModelResponse):
        return MessageRole.ASSISTANT
    if any(isinstance(part, UserPromptPart) for part in message.parts):
        return MessageRole.USER
    return MessageRole.TOOL


def text_of(message: ModelMessage) -> str:
    """Human-readable text of a message for snapshots and UIs."""
    lines: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart | UserPromptPart) and isinstance(part.content, str):
            if part.content:
                lines.append(part.content)
        elif isinstance(part, ToolCallPart):
            lines.append(f"[tool call] {part.tool_name}({part.args_as_json_str()})")
        elif isinstance(part, ToolReturnPart):
            lines.append(f"[{part.outcome}] {part.tool_name}: {part.model_response_str()}")
    return "\n".join(lines)


def to_framework_message(message: ModelMessage) -> FrameworkMessage:
    """Wrap one Pydantic AI message for storage."""
    return FrameworkMessage(
        role=role_of(message), framework_item=dump_message(message), text=text_of(message)
    )


def user_request(text: str) -> ModelRequest:
    """The request holding one user prompt (what ``build_user_message`` stores)."""
    return ModelRequest(parts=[UserPromptPart(text)])


def usage_of(response: ModelResponse | None) -> AgentUsage:
    """Usage of one model call (zero when the step made none)."""
    if response is None:
        return AgentUsage()
    usage = response.usage
    return AgentUsage(
        requests=1,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        total_tokens=usage.input_tokens + usage.output_tokens,
    )


@dataclass(frozen=True, kw_only=True)
class RunState:
    """What continues a turn after its tool Steps, or after a retry request.

    Attributes:
        messages: the turn's messages as Pydantic AI produced them: its request (with
            the system prompts on a session's first request), then model responses,
            tool returns and retry requests. After a retry request it is the last one.
        deferred: the tool call IDs handed to the session, in model order (empty after
            a retry request).
        tool_retries: Pydantic AI's retry count per tool name as the next model call's
            step starts with it (empty by default).
        output_retries: the output retries the run used so far (0 by default).

    """

    messages: list[ModelMessage]
    deferred: list[str]
    tool_retries: dict[str, int] = field(default_factory=dict)
    output_retries: int = 0

    def dump(self) -> str:
        """Encode as a JSON string (never empty)."""
        payload: dict[str, Any] = {
            "format": RUN_STATE_FORMAT,
            "deferred": self.deferred,
            "messages": ModelMessagesTypeAdapter.dump_python(self.messages, mode="json"),
        }
        if self.tool_retries:
            payload["tool_retries"] = self.tool_retries
        if self.output_retries:
            payload["output_retries"] = self.output_retries
        return json.dumps(payload, separators=(",", ":"))

    @classmethod
    def load(cls, raw: str, user_request_item: Any = None) -> RunState:
        """Decode a string from :meth:`dump`.

        ``user_request_item`` (the turn's stored user message) completes a run state of
        the older format ``dex-pydantic-ai/1``, which did not hold the turn's request.

        Raises:
            ValueError: the string is not a run state of this adapter's format.

        """
        payload = json.loads(raw)
        if not isinstance(payload, dict) or payload.get("format") not in (
            RUN_STATE_FORMAT,
            *_OLDER_FORMATS,
        ):
            raise ValueError(f"not a {RUN_STATE_FORMAT} run state")
        messages = load_messages(payload["messages"])
        if payload["format"] != RUN_STATE_FORMAT and user_request_item is not None:
            # Format 1 left out the turn's request; it is the stored user message.
            messages = [*load_messages([user_request_item]), *messages]
        retries = payload.get("tool_retries") or {}
        return cls(
            messages=messages,
            deferred=[str(tool_call_id) for tool_call_id in payload["deferred"]],
            tool_retries={str(name): int(count) for name, count in retries.items()},
            output_retries=int(payload.get("output_retries", 0)),
        )


def deferred_results(
    deferred: Sequence[str], records: Mapping[str, AgentToolCall]
) -> DeferredToolResults:
    """Answer each deferred call from its final record, never by running the tool.

    ``succeeded`` gives the recorded output; ``rejected`` goes through Pydantic AI's native
    denial (``ToolDenied`` with the rejection message); every other final status gives
    ``ToolFailed`` with ``describe_tool_call_outcome`` (providers see it on their error
    channel).

    Raises:
        LookupError: a deferred call has no record.
        ValueError: a record is not final.

    """
    results = DeferredToolResults()
    for tool_call_id in deferred:
        record = records.get(tool_call_id)
        if record is None:
            raise LookupError(f"no record for deferred tool call {tool_call_id!r}")
        if record.status is ToolCallStatus.SUCCEEDED:
            # The plain output, unless the call was edited or reconciled: then the text
            # also says so (describe_tool_call_outcome gives the output alone otherwise).
            results.calls[tool_call_id] = describe_tool_call_outcome(record)
        elif record.status is ToolCallStatus.REJECTED:
            message = record.rejection_message or describe_tool_call_outcome(record)
            results.approvals[tool_call_id] = ToolDenied(message)
        else:
            results.calls[tool_call_id] = ToolFailed(describe_tool_call_outcome(record))
    return results


def with_approved_arguments(
    messages: Sequence[ModelMessage], records: Mapping[str, AgentToolCall]
) -> list[ModelMessage]:
    """Rewrite the model's tool calls an approver edited to the arguments they ran with.

    The model then sees, in its own history, the call as it ran; the record keeps the
    proposed arguments.
    """
    out: list[ModelMessage] = []
    for message in messages:
        if isinstance(message, ModelResponse):
            parts = [_approved_part(part, records) for part in message.parts]
            if any(new is not old for new, old in zip(parts, message.parts, strict=True)):
                message = replace(message, parts=parts)
        out.append(message)
    return out


def _approved_part(part: Any, records: Mapping[str, AgentToolCall]) -> Any:
    if not isinstance(part, ToolCallPart):
        return part
    record = records.get(part.tool_call_id)
    if record is None or not record.arguments_edited:
        return part
    return replace(part, args=record.arguments)
