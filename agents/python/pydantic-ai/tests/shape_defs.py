"""Agents written the way Pydantic AI's documentation writes them, on ``FunctionModel``.

``flagship``: ``output_type=[Resolution, DeferredToolRequests]``, ``system_prompt=``, a
``@agent.system_prompt`` and a dynamic one reading deps, deps tools, a
``requires_approval=True`` refund and an output validator; the model is a
``FunctionModel`` without ``stream_function``.

``validated``: ``output_type=Resolution`` with an output validator (no
``DeferredToolRequests`` of its own), a non-idempotent ``add_note``, a tool call again in
turn 2, and a streaming ``FunctionModel``.

``conditional``: a ``write_file`` tool that raises ``ApprovalRequired`` for ``.env``
only (Pydantic AI's documented conditional approval), classified ``idempotent_write``.

``retried``: the flagship's agent on a streaming ``FunctionModel`` whose model first sends
invalid tool arguments, and in turn 2 a structured output that fails validation:
Pydantic AI asks for a corrected call each time (validation retries).

``toolset``: the refund tool inside an ``ApprovalRequiredToolset`` whose function asks
for approval only above $100 (``toolset.approval_required(fn)``); the model asks for a
small and a large refund; a ``FunctionModel`` without streaming.

The same ``ShapeDesk`` runs under Dex (a Worker child: ``flow_from_env``) and plainly in
the test process (``control_run``), so a test compares what the model saw and answered.
The model function is stateless: it decides from the history it is sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
    current_tool_execution,
)
from dex_agents.testing import FileGate, InvocationLog
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import ApprovalRequired
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.tools import (
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDefinition,
    ToolDenied,
)
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset

from dex_agents_pydantic_ai import PydanticAIRunner

SHAPE_ENV = "PYDANTIC_AI_SHAPE"
STATE_DIR_ENV = "PYDANTIC_AI_SHAPE_STATE_DIR"
MODEL_KIND = "model"
FLAGSHIP = "flagship"
VALIDATED = "validated"
CONDITIONAL = "conditional"
RETRIED = "retried"
TOOLSET = "toolset"
APPROVAL_THRESHOLD = 100
CUSTOMER = "Ada"

FIRST_PROMPT = "My order 1042 arrived broken, please sort it out"
SECOND_PROMPT = "What did you do about my order?"


class Resolution(BaseModel):
    """The structured answer of every turn."""

    answer: str
    refunded: bool


@dataclass
class DeskDeps:
    """The agent's deps: where its services write, and who the customer is."""

    state_dir: Path
    customer: str


def tool_kind(name: str) -> str:
    return f"tool:{name}"


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def part_view(part: Any) -> list[str]:
    """One part as the model sees it (timestamps and run IDs left out)."""
    if isinstance(part, SystemPromptPart | UserPromptPart | TextPart):
        return [part.part_kind, str(part.content)]
    if isinstance(part, ToolCallPart):
        # Key order aside: the store may hand dict arguments back with sorted keys.
        args = json.dumps(part.args_as_dict(), sort_keys=True)
        return [part.part_kind, part.tool_name, args, part.tool_call_id]
    if isinstance(part, ToolReturnPart):
        return [part.part_kind, part.tool_name, _sorted_json(part), part.tool_call_id]
    if isinstance(part, RetryPromptPart):
        return [part.part_kind, part.model_response(), part.tool_call_id]
    return [part.part_kind]


def _sorted_json(part: ToolReturnPart) -> str:
    # Structured content (a retry's validation errors) comes back from the store with its
    # object keys sorted; compare it without key order, like tool call arguments.
    text = part.model_response_str()
    try:
        return json.dumps(json.loads(text), sort_keys=True)
    except ValueError:
        return text


def merged(messages: Sequence[ModelMessage]) -> list[ModelMessage]:
    """Consecutive requests joined, as Pydantic AI joins them before each model call."""
    out: list[ModelMessage] = []
    for message in messages:
        last = out[-1] if out else None
        if isinstance(message, ModelRequest) and isinstance(last, ModelRequest):
            out[-1] = ModelRequest(parts=[*last.parts, *message.parts])
        else:
            out.append(message)
    return out


def conversation_view(
    messages: Sequence[ModelMessage], *, static_only: bool = False
) -> list[list[list[str]]]:
    """Every message as a list of part views; ``static_only`` drops dynamic system prompts."""
    return [
        [
            part_view(part)
            for part in message.parts
            if not (static_only and isinstance(part, SystemPromptPart) and part.dynamic_ref)
        ]
        for message in merged(messages)
    ]


def _turn_and_call(messages: Sequence[ModelMessage]) -> tuple[int, int]:
    prompts = [
        index
        for index, message in enumerate(messages)
        if isinstance(message, ModelRequest)
        and any(isinstance(part, UserPromptPart) for part in message.parts)
    ]
    start = prompts[-1] if prompts else -1
    responses = sum(1 for m in messages[start + 1 :] if isinstance(m, ModelResponse))
    return len(prompts), responses


class ShapeDesk:
    """Tools, model and agent of one shape; everything it records goes to state_dir."""

    def __init__(self, shape: str, state_dir: Path, *, gates: Sequence[str] = ()) -> None:
        self.shape = shape
        self.state_dir = state_dir
        self.gates = set(gates)
        self.log = InvocationLog(state_dir / "calls.log")
        self.inputs_path = state_dir / "model-inputs.jsonl"

    def deps(self) -> DeskDeps:
        return DeskDeps(state_dir=self.state_dir, customer=CUSTOMER)

    def model_inputs(self) -> list[Any]:
        return [json.loads(line) for line in read_lines(self.inputs_path)]

    # ------------------------------------------------------------------ model

    async def reply(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn, call = _turn_and_call(messages)
        self.log.record(MODEL_KIND, f"turn-{turn}/call-{call}")
        gate = f"model-turn-{turn}-call-{call}"
        if gate in self.gates:
            await FileGate(self.state_dir, gate).pass_through()
        with self.inputs_path.open("a") as file:
            file.write(json.dumps(conversation_view(merged(messages))) + "\n")
        if self.shape == CONDITIONAL:
            if call == 0:
                return ModelResponse(
                    parts=[
                        ToolCallPart("write_file", {"path": ".env", "content": "KEY=1"}, "t1-env"),
                        ToolCallPart("write_file", {"path": "README", "content": "hi"}, "t1-doc"),
                    ]
                )
            seen = [
                f"{p.tool_call_id}={p.model_response_str()}"
                for p in messages[-1].parts
                if isinstance(p, ToolReturnPart)
            ]
            return ModelResponse(parts=[TextPart(" | ".join(seen))])
        output_tool = info.output_tools[0].name
        if self.shape == RETRIED:
            return self._retried(turn, call, messages, output_tool)
        if turn == 1 and call == 0 and self.shape == TOOLSET:
            return ModelResponse(
                parts=[
                    ToolCallPart("lookup_order", {"order_id": 1042}, "t1-lookup"),
                    ToolCallPart("issue_refund", {"order_id": 1042, "amount": 20}, "t1-small"),
                    ToolCallPart("issue_refund", {"order_id": 1042, "amount": 249}, "t1-refund"),
                ]
            )
        if turn == 1 and call == 0:
            second = (
                ToolCallPart("issue_refund", {"order_id": 1042, "amount": 249}, "t1-refund")
                if self.shape == FLAGSHIP
                else ToolCallPart("add_note", {"order_id": 1042, "note": "broken"}, "t1-note")
            )
            return ModelResponse(
                parts=[ToolCallPart("lookup_order", {"order_id": 1042}, "t1-lookup"), second]
            )
        if turn == 1:
            returns = [
                part
                for part in messages[-1].parts
                if isinstance(part, ToolReturnPart) and part.outcome == "success"
            ]
            done = "; ".join(part.model_response_str() for part in returns)
            refunded = any(part.tool_name == "issue_refund" for part in returns)
            args = {"answer": f"Done: {done}", "refunded": refunded}
            return ModelResponse(parts=[ToolCallPart(output_tool, args, f"t1-out-{call}")])
        if self.shape == VALIDATED and call == 0:
            # Turn 2 of this shape calls a tool again after turn 1's trailing output return.
            return ModelResponse(
                parts=[ToolCallPart("lookup_order", {"order_id": 1042}, "t2-lookup")]
            )
        system = [
            part.content
            for message in messages
            for part in message.parts
            if isinstance(part, SystemPromptPart)
        ]
        earlier = any(
            isinstance(part, ToolCallPart) and part.tool_name == "lookup_order"
            for message in messages
            for part in message.parts
        )
        args = {"answer": f"Earlier lookup: {earlier}. Context: {' | '.join(system)}"}
        args["refunded"] = self.shape != VALIDATED
        return ModelResponse(parts=[ToolCallPart(output_tool, args, f"t{turn}-out-{call}")])

    def _retried(
        self, turn: int, call: int, messages: Sequence[ModelMessage], output_tool: str
    ) -> ModelResponse:
        if turn == 1 and call == 0:
            # Not an integer: Pydantic AI sends the validation error back for a retry.
            bad = {"order_id": "ten forty-two"}
            return ModelResponse(parts=[ToolCallPart("lookup_order", bad, "t1-bad-lookup")])
        if turn == 1 and call == 1:
            return ModelResponse(
                parts=[
                    ToolCallPart("lookup_order", {"order_id": 1042}, "t1-lookup"),
                    ToolCallPart("issue_refund", {"order_id": 1042, "amount": 249}, "t1-refund"),
                ]
            )
        returns = [
            part
            for message in messages
            for part in message.parts
            if isinstance(part, ToolReturnPart) and part.outcome == "success"
        ]
        done = "; ".join(part.model_response_str() for part in returns)
        if turn == 2 and call == 0:
            # "refunded" is missing: the structured output fails validation.
            return ModelResponse(parts=[ToolCallPart(output_tool, {"answer": done}, "t2-out-0")])
        args = {"answer": f"Done: {done}", "refunded": True}
        return ModelResponse(parts=[ToolCallPart(output_tool, args, f"t{turn}-out-{call}")])

    async def stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | DeltaToolCalls]:
        response = await self.reply(messages, info)
        for index, part in enumerate(response.parts):
            if isinstance(part, ToolCallPart):
                yield {
                    index: DeltaToolCall(
                        name=part.tool_name,
                        json_args=part.args_as_json_str(),
                        tool_call_id=part.tool_call_id,
                    )
                }

    # ------------------------------------------------------------------ tools

    def _enter_tool(self, name: str) -> None:
        execution = current_tool_execution()
        key = execution.idempotency_key if execution is not None else "plain-run"
        self.log.record(tool_kind(name), key)

    def lookup_order(self, ctx: RunContext[DeskDeps], order_id: int) -> str:
        """Look an order up by its number."""
        self._enter_tool("lookup_order")
        return f"order {order_id} of {ctx.deps.customer}: espresso machine, $249"

    def issue_refund(self, ctx: RunContext[DeskDeps], order_id: int, amount: int) -> str:
        """Refund an amount on an order (not idempotent: every call pays out)."""
        self._enter_tool("issue_refund")
        with (ctx.deps.state_dir / "refunds.txt").open("a") as file:
            file.write(f"{order_id}:{amount}\n")
        return f"refund of ${amount} issued for order {order_id}"

    def add_note(self, ctx: RunContext[DeskDeps], order_id: int, note: str) -> str:
        """Add a note to the order's ticket (not idempotent: every call adds one)."""
        self._enter_tool("add_note")
        with (ctx.deps.state_dir / "notes.txt").open("a") as file:
            file.write(f"{order_id}:{note}\n")
        return f"note added to order {order_id}"

    def write_file(self, ctx: RunContext[DeskDeps], path: str, content: str) -> str:
        """Write a file; writing .env needs a human's approval."""
        if path == ".env" and not ctx.tool_call_approved:
            raise ApprovalRequired()
        self._enter_tool("write_file")
        (ctx.deps.state_dir / path).write_text(content)
        return f"wrote {path}"

    # ------------------------------------------------------------------ agent

    def agent(self) -> Agent[DeskDeps, Any]:
        if self.shape == CONDITIONAL:
            plain: Agent[DeskDeps, Any] = Agent(FunctionModel(self.reply), deps_type=DeskDeps)
            plain.tool(metadata={"dex_effect": "idempotent_write"})(self.write_file)
            return plain
        if self.shape in (FLAGSHIP, RETRIED, TOOLSET):
            model = (
                FunctionModel(self.reply, stream_function=self.stream)
                if self.shape == RETRIED
                else FunctionModel(self.reply)
            )
            toolsets: list[AbstractToolset[DeskDeps]] = []
            if self.shape == TOOLSET:
                refunds = FunctionToolset[DeskDeps]([self.issue_refund])
                toolsets.append(refunds.approval_required(above_threshold))
            agent: Agent[DeskDeps, Any] = Agent(
                model,
                deps_type=DeskDeps,
                output_type=[Resolution, DeferredToolRequests],
                system_prompt="You are the support desk of Acme.",
                toolsets=toolsets,
            )
        else:
            agent = Agent(
                FunctionModel(self.reply, stream_function=self.stream),
                deps_type=DeskDeps,
                output_type=Resolution,
                system_prompt="You are the support desk of Acme.",
            )

        @agent.system_prompt
        def customer(ctx: RunContext[DeskDeps]) -> str:
            return f"The customer is {ctx.deps.customer}."

        @agent.system_prompt(dynamic=True)
        def refunds_so_far(ctx: RunContext[DeskDeps]) -> str:
            return f"Refunds issued so far: {len(read_lines(ctx.deps.state_dir / 'refunds.txt'))}."

        @agent.output_validator
        def check(ctx: RunContext[DeskDeps], output: Any) -> Any:
            self.log.record("validator", type(output).__name__)
            return output

        agent.tool(metadata={"annotations": {"readOnlyHint": True}})(self.lookup_order)
        if self.shape in (FLAGSHIP, RETRIED):
            agent.tool(requires_approval=True)(self.issue_refund)
        elif self.shape == VALIDATED:
            agent.tool(self.add_note)
        return agent


def above_threshold(
    ctx: RunContext[DeskDeps], tool_def: ToolDefinition, args: dict[str, Any]
) -> bool:
    """The refund toolset's approval function: a person approves refunds above $100."""
    return int(args["amount"]) > APPROVAL_THRESHOLD


def flow_type(shape: str) -> str:
    return f"PydanticAiShape{shape.title()}"


def build_flow(shape: str, state_dir: Path, gates: Sequence[str] = ()) -> AgentSessionFlow:
    desk = ShapeDesk(shape, state_dir, gates=gates)
    policies: dict[str, ToolPolicy] = {}
    if shape == VALIDATED:
        policies["add_note"] = ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False)
    return AgentSessionFlow(
        PydanticAIRunner(desk.agent(), deps_factory=desk.deps),
        flow_type=flow_type(shape),
        options=AgentSessionOptions(tool_policies=policies),
    )


def flow_from_env() -> AgentSessionFlow:
    gates = [g for g in os.environ.get("PYDANTIC_AI_SHAPE_GATES", "").split(",") if g]
    return build_flow(os.environ[SHAPE_ENV], Path(os.environ[STATE_DIR_ENV]), gates)


async def control_run(
    shape: str, state_dir: Path, prompts: Sequence[str]
) -> tuple[ShapeDesk, list[Any], list[ModelMessage]]:
    """Run the shape's agent with Pydantic AI alone, approving every approval request."""
    desk = ShapeDesk(shape, state_dir)
    agent = desk.agent()
    history: list[ModelMessage] = []
    outputs: list[Any] = []
    for prompt in prompts:
        result = await agent.run(prompt, message_history=history, deps=desk.deps())
        while isinstance(result.output, DeferredToolRequests):
            approvals: dict[str, bool | ToolApproved | ToolDenied] = {
                call.tool_call_id: True for call in result.output.approvals
            }
            result = await agent.run(
                message_history=result.all_messages(),
                deferred_tool_results=DeferredToolResults(approvals=approvals),
                deps=desk.deps(),
            )
        outputs.append(result.output)
        history = result.all_messages()
    return desk, outputs, history
