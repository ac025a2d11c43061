"""A scripted fake ``Model`` for tests and offline demos of OpenAI Agents SDK agents."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from agents import Model, ModelResponse, ModelSettings, ModelTracing, Tool, Usage
from agents.agent_output import AgentOutputSchemaBase
from agents.handoffs import Handoff
from agents.items import TResponseInputItem, TResponseOutputItem, TResponseStreamEvent
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseReasoningItem
from openai.types.responses.response_prompt_param import ResponsePromptParam
from openai.types.responses.response_reasoning_item import Summary


@dataclass(frozen=True, kw_only=True)
class FakeToolCall:
    """One function tool call a fake response asks for.

    Args:
        name: the tool's name.
        arguments: a JSON object (encoded for the model) or JSON text as is.
        call_id: the call ID; None (default) makes ``"call_<user turn>_<call>_<position>"``,
            which is the same whenever the same conversation is replayed.

    """

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    call_id: str | None = None


@dataclass(frozen=True, kw_only=True)
class FakeResponse:
    """One scripted model response.

    Args:
        text: assistant text (streamed as a text delta); None for none.
        tool_calls: function calls to request, in order (several means parallel calls).
        reasoning: a reasoning summary (streamed as a reasoning delta); None for none.
        usage: usage to report; None (default) derives small token counts from the sizes.

    """

    text: str | None = None
    tool_calls: Sequence[FakeToolCall] = ()
    reasoning: str | None = None
    usage: Usage | None = None


@dataclass(frozen=True, kw_only=True)
class FakeModelRequest:
    """What a script sees for one model call.

    Attributes:
        input: the input items the SDK sent (Responses format, plain dicts).
        instructions: the system instructions.
        tool_names: the names of the tools offered.
        user_turn: how many user messages the input holds (1 in a session's first turn).
        call_index: the 0-based model call within the current user turn (one more after
            each batch of tool calls).
        user_text: the text of the last user message.
        tool_outputs: this user turn's tool outputs by call ID (model-visible text).

    """

    input: list[dict[str, Any]]
    instructions: str | None
    tool_names: list[str]
    user_turn: int
    call_index: int
    user_text: str
    tool_outputs: dict[str, str]

    def output_of(self, tool_name: str) -> str | None:
        """Return the latest output of ``tool_name`` in this user turn, or None."""
        calls = {
            str(item.get("call_id")): str(item.get("name"))
            for item in self.input
            if item.get("type") == "function_call"
        }
        found: str | None = None
        for call_id, output in self.tool_outputs.items():
            if calls.get(call_id) == tool_name:
                found = output
        return found


FakeScript: TypeAlias = Callable[[FakeModelRequest], "FakeResponse | str"]
"""Decides one response from the request; a ``str`` is a final text answer."""


class FakeModel(Model):
    """A fake ``agents.Model`` whose answers come from a function of the input.

    It keeps no state between calls: the answer depends only on the request, so a
    RunModel retry on another Worker gets the same answer. It can ask for several tool
    calls at once (parallel calls) and give final answers, and it streams like the real
    Responses API (text and reasoning deltas, then ``response.completed``), because each
    call is played through the SDK's own ``agents.testing.ScriptedModel``.

    Args:
        script: the response for each request (see :class:`FakeModelRequest`).
        on_call: called with each request before it is answered (for example to count
            calls across processes, or to pause at a test gate); may be async.

    Concurrency: safe to share between concurrent runs.

    """

    def __init__(
        self,
        script: FakeScript,
        *,
        on_call: Callable[[FakeModelRequest], Any] | None = None,
    ) -> None:
        self.script = script
        self.on_call = on_call

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        """Answer one non-streamed call from the script."""
        played = await self._played(system_instructions, input, tools)
        return await played.get_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )

    async def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> AsyncIterator[TResponseStreamEvent]:
        """Answer one streamed call from the script."""
        played = await self._played(system_instructions, input, tools)
        async for event in played.stream_response(
            system_instructions,
            input,
            model_settings,
            tools,
            output_schema,
            handoffs,
            tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        ):
            yield event

    async def _played(
        self, instructions: str | None, raw_input: str | list[TResponseInputItem], tools: list[Tool]
    ) -> ScriptedModel:
        request = build_request(instructions, raw_input, [tool.name for tool in tools])
        if self.on_call is not None:
            maybe = self.on_call(request)
            if hasattr(maybe, "__await__"):
                await maybe
        answer = self.script(request)
        response = FakeResponse(text=answer) if isinstance(answer, str) else answer
        output = _output_items(request, response)
        usage = response.usage or _derived_usage(request, output)
        return ScriptedModel([ModelStep(output=output, usage=usage)])


def build_request(
    instructions: str | None, raw_input: str | list[TResponseInputItem], tool_names: list[str]
) -> FakeModelRequest:
    """Describe one model call's input for a :data:`FakeScript`."""
    if isinstance(raw_input, str):
        items: list[dict[str, Any]] = [{"role": "user", "content": raw_input}]
    else:
        items = [dict(item) for item in raw_input]
    last_user = max((i for i, item in enumerate(items) if item.get("role") == "user"), default=-1)
    turn_items = items[last_user + 1 :]
    call_index = 0
    previous_was_call = False
    for item in turn_items:
        is_call = item.get("type") == "function_call"
        if is_call and not previous_was_call:
            call_index += 1
        previous_was_call = is_call
    outputs = {
        str(item.get("call_id")): _output_text(item.get("output"))
        for item in turn_items
        if item.get("type") == "function_call_output"
    }
    return FakeModelRequest(
        input=items,
        instructions=instructions,
        tool_names=tool_names,
        user_turn=sum(1 for item in items if item.get("role") == "user"),
        call_index=call_index,
        user_text=_output_text(items[last_user].get("content")) if last_user >= 0 else "",
        tool_outputs=outputs,
    )


def _output_items(request: FakeModelRequest, response: FakeResponse) -> list[TResponseOutputItem]:
    prefix = f"{request.user_turn}_{request.call_index}"
    items: list[TResponseOutputItem] = []
    if response.reasoning:
        items.append(
            ResponseReasoningItem(
                id=f"rs_{prefix}",
                type="reasoning",
                summary=[Summary(text=response.reasoning, type="summary_text")],
            )
        )
    if response.text:
        items.append(assistant_message(response.text, item_id=f"msg_{prefix}"))
    for position, call in enumerate(response.tool_calls):
        call_id = call.call_id or f"call_{prefix}_{position}"
        items.append(
            function_call(call.name, call.arguments, call_id=call_id, item_id=f"fc_{call_id}")
        )
    return items


def _output_text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        parts = [str(part.get("text", "")) for part in value if isinstance(part, dict)]
        return "".join(parts)
    return "" if value is None else json.dumps(value)


def _derived_usage(request: FakeModelRequest, output: list[TResponseOutputItem]) -> Usage:
    prompt = len(json.dumps(request.input)) // 4 + 1
    completion = sum(len(item.model_dump_json()) for item in output) // 4 + 1
    return Usage(
        requests=1, input_tokens=prompt, output_tokens=completion, total_tokens=prompt + completion
    )
