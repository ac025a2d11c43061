"""A scripted LangChain chat model for offline tests and demos of LangGraph agents."""

from __future__ import annotations

import inspect
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from pydantic import ConfigDict


@dataclass(frozen=True, kw_only=True)
class FakeToolCall:
    """One tool call a scripted reply asks for.

    Attributes:
        name: the tool's name.
        args: the arguments (JSON-compatible).
        id: the tool call ID; None (default) derives ``"call_<turn>_<call>_<index>"``,
            which is stable across retries and unique within a session.

    """

    name: str
    args: dict[str, Any] = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True, kw_only=True)
class FakeReply:
    """One scripted model response.

    Attributes:
        text: the answer text (streamed word by word).
        tool_calls: tool calls to request; several give parallel tool calls.
        reasoning: reasoning text, streamed before the answer as ``reasoning_content``.
        input_tokens: reported prompt tokens (default: a word count of the input).
        output_tokens: reported completion tokens (default: a word count of the reply).

    """

    text: str = ""
    tool_calls: Sequence[FakeToolCall] = ()
    reasoning: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class FakeModelCall:
    """What a script function sees about one model call.

    Attributes:
        messages: the model's input (system prompt included when the agent has one).
        turn_index: 0-based number of the conversation turn (human messages seen - 1).
        call_index: 0-based model call within the turn (AI messages since the last
            human message).
        user_text: the text of the last human message.
        tool_results: the tool messages that answer the previous AI message, in order.

    """

    messages: Sequence[BaseMessage]
    turn_index: int
    call_index: int
    user_text: str
    tool_results: Sequence[ToolMessage]

    def result_of(self, tool_name: str) -> ToolMessage | None:
        """Return the last tool message of ``tool_name`` among ``tool_results``."""
        found = [m for m in self.tool_results if m.name == tool_name]
        return found[-1] if found else None


ScriptResult = FakeReply | str
ScriptFunction = Callable[[FakeModelCall], ScriptResult | Awaitable[ScriptResult]]
Script = ScriptFunction | Sequence[Sequence[ScriptResult | ScriptFunction]]


class ScriptedChatModel(BaseChatModel):
    """A chat model whose replies come from a script; for offline agent tests.

    It derives everything from its input (no hidden counter), so the same conversation
    gets the same reply in any process, as durable sessions need. Use it as the
    ``model`` of ``langchain.agents.create_agent`` or in any graph node.

    Args:
        script: either a function of :class:`FakeModelCall` returning a
            :class:`FakeReply` or a plain text (it may be async), or a list of turns,
            each a list of replies (or functions) picked by ``call_index``.
        default: the reply when a turn list has no entry for the call (default: an
            error, so a script that runs out is noticed).
        on_call: called with every :class:`FakeModelCall` before the reply is built
            (for example to count real model calls across processes).

    ``bind_tools`` accepts any tools and returns the model itself: the script decides
    which tools to call. Concurrency: stateless, safe to share between tasks.

    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    script: Any
    default: Any = None
    on_call: Any = None

    @property
    def _llm_type(self) -> str:
        return "dex-scripted-chat-model"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[LanguageModelInput, AIMessage]:
        """Accept the tools and return the model itself (the script picks the calls)."""
        return self

    # ------------------------------------------------------------------ generation

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = _describe_call(messages)
        result = self._pick(call)
        if inspect.isawaitable(result):
            raise TypeError("an async script function needs the async API (ainvoke/astream)")
        message = _to_message(_as_reply(result), call, messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        call = _describe_call(messages)
        message = _to_message(await self._apick(call), call, messages)
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        call = _describe_call(messages)
        result = self._pick(call)
        if inspect.isawaitable(result):
            raise TypeError("an async script function needs the async API (ainvoke/astream)")
        for chunk in _to_chunks(_as_reply(result), call, messages):
            if run_manager is not None and isinstance(chunk.message.content, str):
                run_manager.on_llm_new_token(chunk.message.content, chunk=chunk)
            yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        call = _describe_call(messages)
        for chunk in _to_chunks(await self._apick(call), call, messages):
            if run_manager is not None and isinstance(chunk.message.content, str):
                await run_manager.on_llm_new_token(chunk.message.content, chunk=chunk)
            yield chunk

    # ------------------------------------------------------------------ script

    def _pick(self, call: FakeModelCall) -> ScriptResult | Awaitable[ScriptResult]:
        if self.on_call is not None:
            self.on_call(call)
        script = self.script
        if callable(script):
            result: ScriptResult | Awaitable[ScriptResult] = script(call)
            return result
        turns: Sequence[Sequence[Any]] = script
        entry: Any = None
        if call.turn_index < len(turns) and call.call_index < len(turns[call.turn_index]):
            entry = turns[call.turn_index][call.call_index]
        if entry is None:
            entry = self.default
        if entry is None:
            raise LookupError(
                f"the script has no reply for turn {call.turn_index}, call {call.call_index}"
            )
        picked: ScriptResult | Awaitable[ScriptResult] = entry(call) if callable(entry) else entry
        return picked

    async def _apick(self, call: FakeModelCall) -> FakeReply:
        result = self._pick(call)
        if inspect.isawaitable(result):
            result = await result
        return _as_reply(result)


def _as_reply(result: ScriptResult) -> FakeReply:
    return FakeReply(text=result) if isinstance(result, str) else result


def _describe_call(messages: Sequence[BaseMessage]) -> FakeModelCall:
    humans = [i for i, m in enumerate(messages) if isinstance(m, HumanMessage)]
    last_human = humans[-1] if humans else -1
    since = messages[last_human + 1 :]
    results: list[ToolMessage] = []
    for message in reversed(since):
        if not isinstance(message, ToolMessage):
            break
        results.insert(0, message)
    return FakeModelCall(
        messages=list(messages),
        turn_index=max(len(humans) - 1, 0),
        call_index=sum(isinstance(m, AIMessage) for m in since),
        user_text=str(messages[last_human].text) if last_human >= 0 else "",
        tool_results=results,
    )


def _words(text: str) -> int:
    return len(text.split())


def _usage(reply: FakeReply, messages: Sequence[BaseMessage]) -> dict[str, int]:
    prompt = reply.input_tokens
    if prompt is None:
        prompt = sum(_words(m.text) for m in messages)
    completion = reply.output_tokens
    if completion is None:
        completion = _words(reply.text) + _words(reply.reasoning) + len(reply.tool_calls)
    return {
        "input_tokens": prompt,
        "output_tokens": completion,
        "total_tokens": prompt + completion,
    }


def _call_id(call: FakeModelCall, index: int, tool_call: FakeToolCall) -> str:
    if tool_call.id is not None:
        return tool_call.id
    return f"call_{call.turn_index}_{call.call_index}_{index}"


def _message_id(call: FakeModelCall) -> str:
    return f"fake-{call.turn_index}-{call.call_index}"


def _to_message(
    reply: FakeReply, call: FakeModelCall, messages: Sequence[BaseMessage]
) -> AIMessage:
    extra = {"reasoning_content": reply.reasoning} if reply.reasoning else {}
    return AIMessage(
        content=reply.text,
        id=_message_id(call),
        additional_kwargs=extra,
        tool_calls=[
            {
                "name": tc.name,
                "args": dict(tc.args),
                "id": _call_id(call, i, tc),
                "type": "tool_call",
            }
            for i, tc in enumerate(reply.tool_calls)
        ],
        usage_metadata=_usage(reply, messages),
    )


def _to_chunks(
    reply: FakeReply, call: FakeModelCall, messages: Sequence[BaseMessage]
) -> Iterator[ChatGenerationChunk]:
    message_id = _message_id(call)
    if reply.reasoning:
        yield ChatGenerationChunk(
            message=AIMessageChunk(
                content="",
                id=message_id,
                additional_kwargs={"reasoning_content": reply.reasoning},
            )
        )
    words = reply.text.split(" ")
    for i, word in enumerate(words):
        piece = word if i == len(words) - 1 else word + " "
        if piece:
            yield ChatGenerationChunk(message=AIMessageChunk(content=piece, id=message_id))
    yield ChatGenerationChunk(
        message=AIMessageChunk(
            content="",
            id=message_id,
            tool_call_chunks=[
                tool_call_chunk(
                    name=tc.name,
                    args=json.dumps(tc.args),
                    id=_call_id(call, i, tc),
                    index=i,
                )
                for i, tc in enumerate(reply.tool_calls)
            ],
            usage_metadata=_usage(reply, messages),  # type: ignore[arg-type]
            chunk_position="last",
        )
    )
