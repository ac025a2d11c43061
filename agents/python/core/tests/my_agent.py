"""The agent of the package guide's samples: a runner written from the runner contract.

``MyFrameworkRunner`` follows the guide's "A runner must" list literally and builds every
outcome positionally, in the guide's order: ``DeferredToolCall(tool_call_id, tool_name,
arguments, policy)``, ``ToolCallsRequested(framework_run_state, tool_calls, usage)``,
``TurnCompleted(new_messages, usage)`` and ``ToolExecutionResult(output)``. Its "framework"
is the embedded scripted model of ``dex_agents.testing``: a model call that asks for tools
reports no usage (``None``), and so does an answer to a message containing "quietly"; any
other final answer reports one request, so the tests see how the session treats usage that
is not reported.

``build_flow()`` is the guide's ``TriageAgent`` Flow; the test process and the Worker
child (``tests.my_worker``) build it the same way. A Worker child logs real model and tool
calls to ``calls.log`` under ``$MY_STATE_DIR`` when that variable is set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    AgentTurnContext,
    AgentTurnOutcome,
    AgentUsage,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    MessageRole,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolPolicy,
    TurnCompleted,
    describe_tool_call_outcome,
)
from dex_agents.testing import (
    MODEL_CALL_KIND,
    InvocationLog,
    ModelCall,
    ScriptedModel,
    ScriptedResponse,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    ScriptedToolResult,
    tool_call_kind,
)

STATE_DIR_ENV = "MY_STATE_DIR"
LOG_NAME = "calls.log"
FINAL_USAGE = AgentUsage(requests=1, input_tokens=12, output_tokens=5, total_tokens=17)


def search_tickets(user: str) -> str:
    return f"3 open tickets for {user}"


def issue_refund(order_id: int) -> str:
    return f"refunded order {order_id}"


def triage(call: ModelCall) -> ScriptedResponse:
    """First call of a turn: pick a tool from the user's words; then answer from results."""
    if call.call_index > 0:
        lines = [f"{r.tool_name}: {r.status}: {r.content}" for r in call.tool_results]
        return ScriptedText(text="\n".join(lines), usage=FINAL_USAGE)
    text = call.user_text.lower()
    if "refund order" in text:
        order_id = int(text.rsplit(" ", 1)[-1])
        calls = [ScriptedToolCall(tool_name="issue_refund", arguments={"order_id": order_id})]
        return ScriptedToolCalls(calls=calls, usage=None)
    if "tickets" in text:
        calls = [ScriptedToolCall(tool_name="search_tickets", arguments={"user": "me"})]
        return ScriptedToolCalls(calls=calls, usage=None)
    if "quietly" in text:
        return ScriptedText(text=f"echo: {call.user_text}", usage=None)
    return ScriptedText(text=f"echo: {call.user_text}", usage=FINAL_USAGE)


@dataclass(frozen=True)
class TriageAgent:
    """The "framework agent": a model, its tools, and where to log real calls."""

    model: ScriptedModel
    tools: Mapping[str, Callable[..., str]] = field(default_factory=dict)
    log: InvocationLog | None = None


def build_agent() -> TriageAgent:
    state_dir = os.environ.get(STATE_DIR_ENV)
    log = InvocationLog(Path(state_dir) / LOG_NAME) if state_dir else None
    tools: dict[str, Callable[..., str]] = {
        "search_tickets": search_tickets,
        "issue_refund": issue_refund,
    }
    return TriageAgent(ScriptedModel(default=triage), tools, log)


class MyFrameworkRunner:
    """A stateless runner: everything comes from the arguments of each call."""

    def __init__(self, agent: TriageAgent) -> None:
        self.agent = agent

    def build_user_message(self, text: str) -> FrameworkMessage:
        return FrameworkMessage(
            role=MessageRole.USER, framework_item={"type": "user", "text": text}, text=text
        )

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        # 1. Without run state, the input is rebuilt from the stored framework items; with
        # it, every pending tool call gets the result of its final record.
        history = [message.framework_item for message in turn.messages]
        user_text = next(i["text"] for i in reversed(history) if i.get("type") == "user")
        items: list[dict[str, Any]] = []
        call_index = 0
        if turn.is_resuming:
            assert turn.framework_run_state is not None
            run_state = json.loads(turn.framework_run_state)
            items, call_index = run_state["items"], run_state["call_index"]
            for pending in run_state["pending"]:
                record = turn.recorded_tool_call(pending["id"])
                result = {**pending, "type": "tool_result", "status": str(record.status)}
                result["content"] = describe_tool_call_outcome(record)
                items.append(result)
        # 2. One model call.
        if self.agent.log is not None:
            key = f"{turn.flow_id}/{turn.turn_id}/{call_index}"
            self.agent.log.record(MODEL_CALL_KIND, key, f"attempt={turn.attempt}")
        response = self.agent.model.respond(
            ModelCall(
                flow_id=turn.flow_id,
                turn_id=turn.turn_id,
                turn_number=int(turn.turn_id.removeprefix("turn-")),
                call_index=call_index,
                attempt=turn.attempt,
                user_text=user_text,
                messages=tuple(turn.messages),
                tool_results=tuple(_results(items)),
            )
        )
        # 3. The response asks for tools: one DeferredToolCall per call, in model order.
        if isinstance(response, ScriptedToolCalls):
            tool_calls: list[DeferredToolCall] = []
            pending_calls: list[dict[str, Any]] = []
            for position, scripted in enumerate(response.calls):
                tool_call_id = f"call-{call_index}-{position}"
                tool_name = scripted.tool_name
                arguments = json.dumps(dict(scripted.arguments), sort_keys=True)
                policy = turn.resolve_tool_policy(tool_name, scripted.effect)
                tool_calls.append(DeferredToolCall(tool_call_id, tool_name, arguments, policy))
                item = {"type": "tool_call", "id": tool_call_id, "name": tool_name}
                item["arguments"] = arguments
                items.append(item)
                pending_calls.append(item)
            state = {"call_index": call_index + 1, "items": items, "pending": pending_calls}
            framework_run_state = json.dumps(state, sort_keys=True)
            # 5. Usage of this model call only; None: the framework reported none.
            usage = response.usage if isinstance(response.usage, AgentUsage) else None
            return ToolCallsRequested(framework_run_state, tool_calls, usage)
        if not isinstance(response, ScriptedText):
            raise RuntimeError(f"the model failed: {response}")
        # 4. The final answer: every item of the turn after its user message, in order.
        turn.events.write_text_delta(response.text)
        items.append({"type": "text", "text": response.text})
        new_messages = [_message(item) for item in items]
        usage = response.usage if isinstance(response.usage, AgentUsage) else None
        return TurnCompleted(new_messages, usage)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        record = call.tool_call
        if self.agent.log is not None:
            kind = tool_call_kind(record.tool_name)
            self.agent.log.record(kind, call.idempotency_key, f"attempt={call.attempt}")
        function = self.agent.tools.get(record.tool_name)
        if function is None:
            raise ToolExecutionError(f"unknown tool {record.tool_name!r}")
        output = function(**json.loads(record.arguments))
        return ToolExecutionResult(output)


def _results(items: list[dict[str, Any]]) -> list[ScriptedToolResult]:
    return [
        ScriptedToolResult(
            tool_call_id=item["id"],
            tool_name=item["name"],
            arguments=json.loads(item["arguments"]),
            status=ToolCallStatus(item["status"]),
            content=item["content"],
        )
        for item in items
        if item["type"] == "tool_result"
    ]


def _message(item: dict[str, Any]) -> FrameworkMessage:
    if item["type"] == "tool_call":
        text = f"{item['name']}({item['arguments']})"
        return FrameworkMessage(MessageRole.ASSISTANT, item, text)
    if item["type"] == "tool_result":
        return FrameworkMessage(MessageRole.TOOL, item, item["content"])
    return FrameworkMessage(MessageRole.ASSISTANT, item, item["text"])


def build_flow() -> AgentSessionFlow:
    """The guide's ``TriageAgent``: ``search_tickets`` is a read, the rest unclassified."""
    agent = build_agent()
    flow = AgentSessionFlow(
        MyFrameworkRunner(agent),
        flow_type="TriageAgent",
        options=AgentSessionOptions(
            tool_policies={"search_tickets": ToolPolicy(ToolEffect.READ)},
        ),
    )
    return flow
