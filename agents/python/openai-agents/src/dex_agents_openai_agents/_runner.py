"""``OpenAIAgentsRunner``: runs an OpenAI Agents SDK ``Agent`` as a dex-agents session."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

from agents import (
    Agent,
    FunctionTool,
    ModelBehaviorError,
    RunConfig,
    RunContextWrapper,
    Runner,
    Tool,
    ToolApprovalItem,
)
from agents.tool import (
    CodeInterpreterTool,
    FileSearchTool,
    HostedMCPTool,
    ImageGenerationTool,
    WebSearchTool,
    default_tool_error_function,
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext
from dex_agents import (
    AgentToolCall,
    AgentTurnContext,
    AgentTurnOutcome,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    ToolCallsRequested,
    ToolCallStatus,
    ToolExecutionError,
    ToolExecutionResult,
    TurnCompleted,
    describe_tool_call_outcome,
)

from dex_agents_openai_agents._guard import CallBudget, guarded_run_config
from dex_agents_openai_agents._items import (
    decode_run_state,
    encode_run_state,
    framework_messages,
    input_items,
    user_message,
)
from dex_agents_openai_agents._policies import resolve_policy
from dex_agents_openai_agents._streaming import forward_deltas

DEFAULT_MAX_TURNS = 10_000
"""The SDK's ``max_turns`` for each step: Dex owns the loop, so the SDK's cap is out of the way."""

_HOSTED_TOOLS = (
    WebSearchTool,
    FileSearchTool,
    CodeInterpreterTool,
    ImageGenerationTool,
    HostedMCPTool,
)


class OpenAIAgentsRunner:
    """Runs an existing ``agents.Agent`` as a durable dex-agents session.

    Attach it to the agent you already have and hand it to ``AgentSessionFlow``::

        runner = OpenAIAgentsRunner(agent)
        flow = AgentSessionFlow(runner, flow_type="SupportDesk", options=...)

    Prompts, tools, model and model settings stay the agent's own. Each RunModel Step
    runs the SDK's ``Runner.run_streamed`` for exactly one model call: every function tool
    is marked as needing approval in a per-step copy of the agent, so the SDK stops with
    its interruptions instead of running tools; the adapter returns them as deferred
    calls and the serialized ``RunState`` as run state. After the tool Steps, the state is
    restored, every call is approved (its copy then returns the recorded result instead
    of running the tool) or rejected natively with the rejection text, and the SDK makes
    the next model call. A second model call in one step fails the attempt.

    Function tools (``@function_tool`` and tools from MCP servers) are deferred: each call
    is its own Step. Hosted tools (web search, file search, code interpreter, image
    generation, hosted MCP) run at OpenAI during the model call, so a RunModel retry may
    run them again (at-least-once).

    Args:
        agent: the user's agent. Its name and tools must stay the same while a session
            waits for tool calls (the run state names them).
        run_config: the SDK ``RunConfig`` for every step (model provider, model override,
            model settings); default ``RunConfig(tracing_disabled=True)``. A config you
            pass is used as is (set ``tracing_disabled`` there as you need).
        context_factory: returns the app context object (``RunContextWrapper.context``)
            for each step and each tool call; default: None as context. It runs on the
            Worker, so it may open clients; a mapping context is stored in the run state
            (the SDK serializes it), any other object is left out.
        max_turns: the SDK's ``max_turns`` per step (default 10,000).

    Raises:
        ValueError: the agent has handoffs, or local tools the SDK runs with its own
            executors (shell, computer, apply-patch, custom tools), which cannot be
            deferred.

    Concurrency: stateless between calls; ``execute_deferred_tool_call`` may run
    concurrently with itself, so tools must be safe to run concurrently.

    """

    def __init__(
        self,
        agent: Agent[Any],
        *,
        run_config: RunConfig | None = None,
        context_factory: Callable[[], Any] | None = None,
        max_turns: int = DEFAULT_MAX_TURNS,
    ) -> None:
        if agent.handoffs:
            raise ValueError(
                f"agent {agent.name!r} has handoffs: a handoff makes several model calls in "
                "one step; run each agent as its own session or call it as a tool instead"
            )
        for tool in agent.tools:
            _check_deferrable(tool)
        self.agent = agent
        self.run_config = run_config if run_config is not None else RunConfig(tracing_disabled=True)
        self.context_factory = context_factory
        self.max_turns = max_turns

    # ------------------------------------------------------------------ contract

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Return the user message as a Responses input item."""
        return user_message(text)

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Let the SDK make one model call and stop before any function tool runs."""
        context = self._new_context()
        tools = await self._all_tools(context)
        recorded = _recorded_outputs(turn.tool_calls)
        budget = CallBudget()
        step_agent, run_config = self._step_agent(tools, recorded, budget)
        stored = input_items(turn.messages)
        if turn.framework_run_state is None:
            result = Runner.run_streamed(
                step_agent, stored, context=context, max_turns=self.max_turns, run_config=run_config
            )
        else:
            state = await decode_run_state(step_agent, turn.framework_run_state, context=context)
            for item in state.get_interruptions():
                _answer(state, item, turn)
            result = Runner.run_streamed(
                step_agent, state, context=context, max_turns=self.max_turns, run_config=run_config
            )
        await forward_deltas(result, turn.events)
        usage = budget.usage()
        if result.interruptions:
            calls = [
                await self._deferred_call(turn, item, tools, context)
                for item in result.interruptions
            ]
            return ToolCallsRequested(
                framework_run_state=encode_run_state(result.to_state()),
                tool_calls=calls,
                usage=usage,
            )
        new_items = result.to_input_list()[len(stored) :]
        return TurnCompleted(new_messages=framework_messages(new_items), usage=usage)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run the real function tool once, through its own ``on_invoke_tool``.

        The SDK's default failure formatter is switched off for this call, so an exception
        fails the Step and the effect's retry policy applies. Raise ``ToolExecutionError``
        from a tool for a failure the model should see; invalid arguments are one too.
        """
        record = call.tool_call
        context = self._new_context()
        tool = _by_name(await self._all_tools(context)).get(record.tool_name)
        if tool is None:
            raise ToolExecutionError(f"unknown tool {record.tool_name!r}")
        runnable = copy.copy(tool)
        if resolve_function_tool_failure_error_function(tool) is default_tool_error_function:
            set_function_tool_failure_error_function(runnable, None)
        tool_context = ToolContext(
            context=context,
            tool_name=record.tool_name,
            tool_call_id=record.tool_call_id,
            tool_arguments=record.arguments,
            agent=self.agent,
            run_config=self.run_config,
        )
        try:
            output = await runnable.on_invoke_tool(tool_context, record.arguments)
        except ModelBehaviorError as exc:
            # The model sent arguments the tool's schema refuses: a retry would not help.
            raise ToolExecutionError(str(exc)) from exc
        return ToolExecutionResult(output=_output_text(output))

    # ------------------------------------------------------------------ helpers

    def _new_context(self) -> Any:
        return self.context_factory() if self.context_factory is not None else None

    async def _all_tools(self, context: Any) -> list[Tool]:
        mcp_tools = await self.agent.get_mcp_tools(RunContextWrapper(context=context))
        tools: list[Tool] = [*self.agent.tools, *mcp_tools]
        for tool in mcp_tools:
            _check_deferrable(tool)
        return tools

    def _step_agent(
        self, tools: list[Tool], recorded: Mapping[str, str], budget: CallBudget
    ) -> tuple[Agent[Any], RunConfig]:
        step_tools = [
            _replaying_copy(tool, recorded) if isinstance(tool, FunctionTool) else tool
            for tool in tools
        ]
        run_config = guarded_run_config(self.run_config, self.agent.model, budget)
        changes: dict[str, Any] = {"tools": step_tools, "mcp_servers": []}
        model = budget.guard_model(self.agent.model)
        if model is not None:
            changes["model"] = model
        return self.agent.clone(**changes), run_config

    async def _deferred_call(
        self, turn: AgentTurnContext, item: ToolApprovalItem, tools: list[Tool], context: Any
    ) -> DeferredToolCall:
        raw = item.raw_item
        kind = _field(raw, "type")
        if kind != "function_call":
            raise RuntimeError(
                f"the SDK asked to approve a {kind!r} call, which cannot be deferred"
            )
        name = str(_field(raw, "name"))
        call_id = str(_field(raw, "call_id") or "")
        arguments = str(_field(raw, "arguments") or "")
        tool = _by_name(tools).get(name)
        policy = await resolve_policy(turn, tool, name, arguments, call_id, context)
        return DeferredToolCall(
            tool_call_id=call_id, tool_name=name, arguments=arguments, policy=policy
        )


def _check_deferrable(tool: Tool) -> None:
    if isinstance(tool, (FunctionTool, *_HOSTED_TOOLS)):
        return
    raise ValueError(
        f"tool {getattr(tool, 'name', tool)!r} ({type(tool).__name__}) runs through the SDK's "
        "own executor and cannot be deferred to a Dex Step; wrap it in a function tool"
    )


def _replaying_copy(tool: FunctionTool, recorded: Mapping[str, str]) -> FunctionTool:
    """A copy that always stops for approval and, once approved, returns the record."""

    async def replay(context: ToolContext[Any], _arguments: str) -> str:
        try:
            return recorded[context.tool_call_id]
        except KeyError:
            raise RuntimeError(
                f"tool call {context.tool_call_id!r} has no final record in this turn"
            ) from None

    replaying = copy.copy(tool)
    replaying.on_invoke_tool = replay
    replaying.needs_approval = True
    # Guardrails would judge a call that already ran; the recorded text is returned as is.
    replaying.tool_input_guardrails = None
    replaying.tool_output_guardrails = None
    replaying.timeout_seconds = None
    return replaying


def _recorded_outputs(records: Mapping[str, AgentToolCall]) -> dict[str, str]:
    return {
        call_id: describe_tool_call_outcome(record)
        for call_id, record in records.items()
        if record.status.is_final
    }


def _answer(state: Any, item: ToolApprovalItem, turn: AgentTurnContext) -> None:
    call_id = str(_field(item.raw_item, "call_id") or "")
    record = turn.tool_calls.get(call_id)
    if record is None:
        raise LookupError(f"no record for tool call {call_id!r} of {turn.turn_id}")
    if record.status is ToolCallStatus.REJECTED:
        # The SDK's native rejection: this text is the function_call_output the model sees.
        state.reject(item, rejection_message=describe_tool_call_outcome(record))
    else:
        state.approve(item)


def _by_name(tools: list[Tool]) -> dict[str, FunctionTool]:
    return {tool.name: tool for tool in tools if isinstance(tool, FunctionTool)}


def _field(raw: Any, name: str) -> Any:
    if isinstance(raw, Mapping):
        return raw.get(name)
    return getattr(raw, name, None)


def _output_text(output: object) -> str:
    if isinstance(output, str):
        return output
    dump = getattr(output, "model_dump_json", None)
    if callable(dump):
        return str(dump())
    try:
        return json.dumps(output, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return str(output)
