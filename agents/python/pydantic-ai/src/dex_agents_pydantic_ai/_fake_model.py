"""``FakeModel``: a scripted, stateless Pydantic AI model for tests and offline demos."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingCalls,
    DeltaThinkingPart,
    DeltaToolCall,
    DeltaToolCalls,
    FunctionModel,
)


@dataclass(frozen=True, kw_only=True)
class FakeToolCall:
    """One tool call a scripted reply asks for.

    Attributes:
        tool_name: the tool.
        arguments: its arguments (JSON-compatible).
        tool_call_id: the ID; None (default) derives a stable one from the turn, the model
            call and the position (``call-<turn>-<call>-<position>``), so a retried model
            call asks for the same IDs.

    """

    tool_name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class FakeReply:
    """One scripted model response: text, reasoning and any number of parallel tool calls.

    A reply without tool calls is the final answer of the turn.
    """

    text: str = ""
    tool_calls: Sequence[FakeToolCall] = ()
    thinking: str = ""


@dataclass(frozen=True, kw_only=True)
class FakeModelCall:
    """What a script sees of one model call.

    Attributes:
        messages: the whole history sent to the model.
        turn_number: 1-based count of user prompts in the history.
        user_text: the text of the last user prompt.
        call_index: 0-based model call within the turn (responses since that prompt).
        info: the framework's ``AgentInfo`` (tools, instructions).

    """

    messages: Sequence[ModelMessage]
    turn_number: int
    user_text: str
    call_index: int
    info: AgentInfo

    def tool_returns(self) -> list[ToolReturnPart]:
        """Every tool return of the current turn, oldest first."""
        start = _last_prompt_index(self.messages) + 1
        return [
            part
            for message in self.messages[start:]
            if isinstance(message, ModelRequest)
            for part in message.parts
            if isinstance(part, ToolReturnPart)
        ]

    def result_of(self, tool_name: str) -> ToolReturnPart | None:
        """The latest return of ``tool_name`` in this turn, or None."""
        found = [part for part in self.tool_returns() if part.tool_name == tool_name]
        return found[-1] if found else None

    def saw_text(self, text: str) -> bool:
        """Whether any earlier user prompt or model text in the history contains ``text``."""
        for message in self.messages:
            for part in message.parts:
                content = getattr(part, "content", None)
                if isinstance(part, UserPromptPart | TextPart) and isinstance(content, str):
                    if text in content:
                        return True
        return False


FakeStep: TypeAlias = FakeReply | str | Callable[[FakeModelCall], "FakeReply | str"]
FakeScript: TypeAlias = Callable[[FakeModelCall], FakeReply | str] | Sequence[FakeStep]
OnCall: TypeAlias = Callable[[FakeModelCall], Awaitable[None] | None]


class FakeModel(FunctionModel):
    """A scripted model that decides every reply from the history it is sent.

    It keeps no state between calls, so a turn may continue in another process (as a
    durable session does after a crash). It can request parallel tool calls, stream text
    and reasoning, and give final answers by script.

    Args:
        script: a function ``(FakeModelCall) -> FakeReply | str``, or a sequence of steps
            (a ``FakeReply``, a string as a final answer, or such a function) chosen by
            the call's ``call_index`` in the turn; past its end the last step repeats.
        on_call: called (and awaited when async) before each reply; tests use it to
            count calls or to pause at a gate.
        model_name: the reported model name (default ``"dex-fake"``).

    Concurrency: safe to share; each call is independent.

    """

    def __init__(
        self,
        script: FakeScript,
        *,
        on_call: OnCall | None = None,
        model_name: str = "dex-fake",
    ) -> None:
        self._script = script
        self._on_call = on_call
        super().__init__(self._respond, stream_function=self._stream, model_name=model_name)

    async def _reply(self, messages: list[ModelMessage], info: AgentInfo) -> FakeReply:
        call = _call_of(messages, info)
        if self._on_call is not None:
            pending = self._on_call(call)
            if inspect.isawaitable(pending):
                await pending
        script = self._script
        step: FakeStep
        if callable(script):
            step = script
        else:
            if not script:
                raise ValueError("FakeModel script is empty")
            step = script[min(call.call_index, len(script) - 1)]
        result = step(call) if callable(step) else step
        reply = FakeReply(text=result) if isinstance(result, str) else result
        return _with_ids(reply, call)

    async def _respond(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        reply = await self._reply(messages, info)
        parts: list[Any] = []
        if reply.thinking:
            parts.append(ThinkingPart(reply.thinking))
        if reply.text:
            parts.append(TextPart(reply.text))
        for tool in reply.tool_calls:
            parts.append(
                ToolCallPart(
                    tool.tool_name, dict(tool.arguments), tool_call_id=tool.tool_call_id or ""
                )
            )
        return ModelResponse(parts=parts)

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls | DeltaThinkingCalls]:
        reply = await self._reply(messages, info)
        if reply.thinking:
            yield {0: DeltaThinkingPart(content=reply.thinking)}
        for chunk in re.findall(r"\S+\s*|\s+", reply.text):
            yield chunk
        for position, tool in enumerate(reply.tool_calls, start=1):
            yield {
                position: DeltaToolCall(
                    name=tool.tool_name,
                    json_args=_json(tool.arguments),
                    tool_call_id=tool.tool_call_id,
                )
            }


def _json(arguments: Mapping[str, Any]) -> str:
    return json.dumps(dict(arguments), sort_keys=True)


def _last_prompt_index(messages: Sequence[ModelMessage]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, ModelRequest) and any(
            isinstance(part, UserPromptPart) for part in message.parts
        ):
            return index
    return -1


def _call_of(messages: list[ModelMessage], info: AgentInfo) -> FakeModelCall:
    start = _last_prompt_index(messages)
    user_text = ""
    if start >= 0:
        for part in messages[start].parts:
            if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                user_text = part.content
    prompts = sum(
        1
        for message in messages
        if isinstance(message, ModelRequest)
        and any(isinstance(part, UserPromptPart) for part in message.parts)
    )
    responses = sum(1 for message in messages[start + 1 :] if isinstance(message, ModelResponse))
    return FakeModelCall(
        messages=tuple(messages),
        turn_number=prompts,
        user_text=user_text,
        call_index=responses,
        info=info,
    )


def _with_ids(reply: FakeReply, call: FakeModelCall) -> FakeReply:
    calls = [
        tool
        if tool.tool_call_id
        else FakeToolCall(
            tool_name=tool.tool_name,
            arguments=tool.arguments,
            tool_call_id=f"call-{call.turn_number}-{call.call_index}-{position}",
        )
        for position, tool in enumerate(reply.tool_calls)
    ]
    return FakeReply(text=reply.text, tool_calls=calls, thinking=reply.thinking)
