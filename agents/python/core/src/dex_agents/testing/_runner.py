"""``ScriptedRunner``: an ``AgentFrameworkRunner`` driven by a ``ScriptedModel``."""

from __future__ import annotations

import contextvars
import inspect
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from dex_agents import (
    AgentTurnContext,
    AgentUsage,
    ContinueTurn,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    MessageRole,
    ModelStepOutcome,
    ToolCallsRequested,
    ToolCallStatus,
    ToolExecutionError,
    ToolExecutionResult,
    TurnCompleted,
    describe_tool_call_outcome,
)
from dex_agents.testing._gates import FileGate
from dex_agents.testing._log import InvocationLog
from dex_agents.testing._script import (
    ModelCall,
    ScriptedContinue,
    ScriptedFailure,
    ScriptedModel,
    ScriptedResponse,
    ScriptedText,
    ScriptedToolCalls,
    ScriptedToolResult,
    turn_number,
)

ScriptedTool: TypeAlias = Callable[..., Any]
"""A tool: called with the model's arguments as keyword arguments; may be async.

It returns the output (a ``str`` is used as is, anything else is JSON-encoded), or raises
``ToolExecutionError`` for a failure the model should see. :func:`current_tool_call`
gives it its idempotency key and attempt.
"""

MODEL_CALL_KIND = "model"
"""``InvocationLog`` kind of a model call (key ``"<flow_id>/<turn_id>/<call index>"``)."""


def tool_call_kind(tool_name: str) -> str:
    """``InvocationLog`` kind of a call of ``tool_name`` (key: the idempotency key)."""
    return f"tool:{tool_name}"


@dataclass(frozen=True, kw_only=True)
class ScriptedToolContext:
    """What a running scripted tool can learn about its call (:func:`current_tool_call`).

    Attributes:
        flow_id: the session ID.
        turn_id: the turn that requested the call.
        tool_call_id: the call's ID.
        tool_name: the tool.
        idempotency_key: ``"<flow_id>/<turn_id>/<tool_call_id>"``, the same on every attempt.
        attempt: the tool Step's attempt (1-based).
        gate_dir: the runner's gate directory, or None.

    """

    flow_id: str
    turn_id: str
    tool_call_id: str
    tool_name: str
    idempotency_key: str
    attempt: int
    gate_dir: Path | None

    async def pass_gate(self, name: str) -> None:
        """Mark the ``FileGate`` ``name`` reached and wait for its release.

        Raises:
            RuntimeError: the runner has no ``gate_dir``.

        """
        if self.gate_dir is None:
            raise RuntimeError("the ScriptedRunner was built without gate_dir")
        await FileGate(self.gate_dir, name).pass_through()


_CURRENT: contextvars.ContextVar[ScriptedToolContext] = contextvars.ContextVar("scripted_tool")


def current_tool_call() -> ScriptedToolContext:
    """Return the call a scripted tool is running for (only valid inside the tool).

    Raises:
        LookupError: called outside a scripted tool.

    """
    return _CURRENT.get()


class ScriptedModelError(RuntimeError):
    """Raised by a scripted model call that is scripted to fail."""


class ScriptedRunner:
    """A runner for tests and demos: a :class:`ScriptedModel` plus Python tool functions.

    It follows the runner contract exactly: one scripted model call per
    ``run_model_step``; tool calls are returned as ``ToolCallsRequested`` with a JSON run
    state holding the turn's items so far (a :class:`ScriptedContinue` as ``ContinueTurn``
    with the same kind of state); on resume, each call's result comes from its
    final record through ``describe_tool_call_outcome``; the final ``TurnCompleted``
    carries every item of the turn after its user message; usage is reported per call
    (derived from text lengths unless the response scripts one, or None).
    It keeps nothing between calls, so any Worker process can continue a turn.

    Framework items are JSON objects with ``"type"``: ``user``, ``text``, ``tool_call``
    or ``tool_result``.

    Args:
        model: the script.
        tools: tool functions by name (see :data:`ScriptedTool`).
        log: records every real model call (kind ``"model"``) and tool call (kind
            ``"tool:<name>"``, key the idempotency key) when given.
        gate_dir: directory of the ``FileGate`` s named by responses and ``tool_gates``.
        tool_gates: a gate name per tool name, passed before the tool function runs
            (after it is logged); formatted with ``tool_call_id``, ``turn_id``,
            ``tool_name`` and ``attempt``. A released gate lets retries through.

    Concurrency: tool calls of one response run concurrently in separate Steps; the
    runner is stateless, and tools must be safe to run concurrently.

    """

    def __init__(
        self,
        model: ScriptedModel,
        tools: Mapping[str, ScriptedTool] | None = None,
        *,
        log: InvocationLog | None = None,
        gate_dir: str | os.PathLike[str] | None = None,
        tool_gates: Mapping[str, str] | None = None,
    ) -> None:
        self.model = model
        self.tools = dict(tools or {})
        self.log = log
        self.gate_dir = Path(gate_dir) if gate_dir is not None else None
        self.tool_gates = dict(tool_gates or {})

    # ------------------------------------------------------------------ contract

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Wrap user text as a ``user`` framework item."""
        return FrameworkMessage(
            role=MessageRole.USER, framework_item={"type": "user", "text": text}, text=text
        )

    async def run_model_step(self, turn: AgentTurnContext) -> ModelStepOutcome:
        """Make one scripted model call for ``turn``."""
        state = _RunState.load(turn.framework_run_state)
        if turn.framework_run_state is not None:
            state.resume(turn)
        call = ModelCall(
            flow_id=turn.flow_id,
            turn_id=turn.turn_id,
            turn_number=turn_number(turn.turn_id),
            call_index=state.call_index,
            attempt=turn.attempt,
            user_text=_last_user_text(turn),
            messages=tuple(turn.messages),
            tool_results=tuple(state.results()),
        )
        if self.log is not None:
            self.log.record(
                MODEL_CALL_KIND,
                f"{turn.flow_id}/{turn.turn_id}/{state.call_index}",
                f"attempt={turn.attempt}",
            )
        response = self.model.respond(call)
        if response.gate is not None:
            await self._pass_gate(
                response.gate.format(
                    turn_id=turn.turn_id, call_index=state.call_index, attempt=turn.attempt
                )
            )
        if isinstance(response, ScriptedFailure):
            raise ScriptedModelError(response.message)
        if turn.attempt <= response.fail_attempts:
            # Like a model that dies mid-stream: part of the answer, then an error.
            if isinstance(response, ScriptedText) and response.text:
                turn.events.write_text_delta(response.text[: max(1, len(response.text) // 2)])
            raise ScriptedModelError(f"scripted failure of attempt {turn.attempt}")
        scripted_usage = response.usage
        usage = (
            _derived_usage(call, response) if isinstance(scripted_usage, str) else scripted_usage
        )
        if isinstance(response, ScriptedText):
            if response.text:
                turn.events.write_text_delta(response.text)
            state.items.append({"type": "text", "text": response.text})
            return TurnCompleted(new_messages=[_message(item) for item in state.items], usage=usage)
        if isinstance(response, ScriptedContinue):
            if response.text:
                turn.events.write_text_delta(response.text)
                state.items.append({"type": "text", "text": response.text})
            state.call_index += 1
            return ContinueTurn(state.dump(), usage, response.reason)
        return self._request_tools(turn, state, response, usage)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run the tool function of one approved call, once."""
        record = call.tool_call
        if self.log is not None:
            self.log.record(
                tool_call_kind(record.tool_name), call.idempotency_key, f"attempt={call.attempt}"
            )
        context = ScriptedToolContext(
            flow_id=call.flow_id,
            turn_id=record.turn_id,
            tool_call_id=record.tool_call_id,
            tool_name=record.tool_name,
            idempotency_key=call.idempotency_key,
            attempt=call.attempt,
            gate_dir=self.gate_dir,
        )
        gate = self.tool_gates.get(record.tool_name)
        if gate is not None:
            await self._pass_gate(
                gate.format(
                    tool_call_id=record.tool_call_id,
                    turn_id=record.turn_id,
                    tool_name=record.tool_name,
                    attempt=call.attempt,
                )
            )
        function = self.tools.get(record.tool_name)
        if function is None:
            raise ToolExecutionError(f"unknown tool {record.tool_name!r}")
        arguments = json.loads(record.arguments) if record.arguments else {}
        token = _CURRENT.set(context)
        try:
            output = function(**arguments)
            if inspect.isawaitable(output):
                output = await output
        finally:
            _CURRENT.reset(token)
        return ToolExecutionResult(output=_output_text(output))

    # ------------------------------------------------------------------ helpers

    def _request_tools(
        self,
        turn: AgentTurnContext,
        state: _RunState,
        response: ScriptedToolCalls,
        usage: AgentUsage | None,
    ) -> ToolCallsRequested:
        if response.text:
            turn.events.write_text_delta(response.text)
            state.items.append({"type": "text", "text": response.text})
        deferred: list[DeferredToolCall] = []
        pending: list[dict[str, Any]] = []
        for position, scripted in enumerate(response.calls):
            call_id = scripted.tool_call_id
            if call_id is None:
                call_id = f"call-{state.call_index}-{position}"
            arguments = json.dumps(dict(scripted.arguments), sort_keys=True)
            item = {"type": "tool_call", "id": call_id, "name": scripted.tool_name}
            item["arguments"] = arguments
            state.items.append(item)
            pending.append(item)
            deferred.append(
                DeferredToolCall(
                    tool_call_id=call_id,
                    tool_name=scripted.tool_name,
                    arguments=arguments,
                    policy=turn.resolve_tool_policy(scripted.tool_name, scripted.effect),
                )
            )
        state.pending = pending
        state.call_index += 1
        return ToolCallsRequested(
            framework_run_state=state.dump(), tool_calls=deferred, usage=usage
        )

    async def _pass_gate(self, name: str) -> None:
        if self.gate_dir is None:
            raise RuntimeError(f"gate {name!r} named, but the ScriptedRunner has no gate_dir")
        await FileGate(self.gate_dir, name).pass_through()


class _RunState:
    """The scripted framework's run state: this turn's items, the unanswered calls."""

    def __init__(self, call_index: int, items: list[dict[str, Any]], pending: list[dict[str, Any]]):
        self.call_index = call_index
        self.items = items
        self.pending = pending

    @classmethod
    def load(cls, raw: str | None) -> _RunState:
        if not raw:
            return cls(0, [], [])
        data = json.loads(raw)
        return cls(int(data["call_index"]), list(data["items"]), list(data["pending"]))

    def dump(self) -> str:
        payload = {"call_index": self.call_index, "items": self.items, "pending": self.pending}
        return json.dumps(payload, sort_keys=True, separators=(",", ":"))

    def resume(self, turn: AgentTurnContext) -> None:
        # Every pending call gets the result of its final record, never a fresh run.
        for item in self.pending:
            record = turn.tool_calls.get(item["id"])
            if record is None:
                raise LookupError(f"no record for tool call {item['id']!r} of {turn.turn_id}")
            if record.arguments_edited:
                # The model sees the call as it ran: with the approver's arguments.
                for stored in (item, *self._tool_call_items(item["id"])):
                    stored["proposed_arguments"] = record.proposed_arguments
                    stored["arguments"] = record.arguments
            self.items.append(
                {
                    "type": "tool_result",
                    "id": item["id"],
                    "name": item["name"],
                    "arguments": item["arguments"],
                    "status": str(record.status),
                    "content": describe_tool_call_outcome(record),
                }
            )
        self.pending = []

    def _tool_call_items(self, call_id: str) -> list[dict[str, Any]]:
        return [i for i in self.items if i["type"] == "tool_call" and i["id"] == call_id]

    def results(self) -> list[ScriptedToolResult]:
        return [
            ScriptedToolResult(
                tool_call_id=item["id"],
                tool_name=item["name"],
                arguments=json.loads(item["arguments"]) if item["arguments"] else {},
                status=ToolCallStatus(item["status"]),
                content=item["content"],
            )
            for item in self.items
            if item["type"] == "tool_result"
        ]


def _message(item: dict[str, Any]) -> FrameworkMessage:
    kind = item["type"]
    if kind == "tool_call":
        text = f"{item['name']}({item['arguments']})"
        return FrameworkMessage(role=MessageRole.ASSISTANT, framework_item=item, text=text)
    if kind == "tool_result":
        return FrameworkMessage(role=MessageRole.TOOL, framework_item=item, text=item["content"])
    return FrameworkMessage(role=MessageRole.ASSISTANT, framework_item=item, text=item["text"])


def _last_user_text(turn: AgentTurnContext) -> str:
    for message in reversed(turn.messages):
        if message.role == MessageRole.USER:
            return message.text
    return ""


def _derived_usage(call: ModelCall, response: ScriptedResponse) -> AgentUsage:
    prompt = sum(len(message.text) for message in call.messages) + sum(
        len(result.content) for result in call.tool_results
    )
    if isinstance(response, ScriptedText):
        completion = len(response.text)
    elif isinstance(response, ScriptedContinue):
        completion = len(response.text or "")
    elif isinstance(response, ScriptedToolCalls):
        completion = sum(
            len(json.dumps(dict(c.arguments))) + len(c.tool_name) for c in response.calls
        )
    else:
        completion = 0
    input_tokens, output_tokens = prompt // 4 + 1, completion // 4 + 1
    return AgentUsage(
        requests=1,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


def _output_text(output: object) -> str:
    if isinstance(output, str):
        return output
    return json.dumps(output, sort_keys=True, default=str)
