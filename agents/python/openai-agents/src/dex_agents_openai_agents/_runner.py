"""``OpenAIAgentsRunner``: runs an OpenAI Agents SDK ``Agent`` as a dex-agents session."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from typing import Any, Literal, cast

from agents import (
    Agent,
    FunctionTool,
    InputGuardrailTripwireTriggered,
    ModelBehaviorError,
    OutputGuardrailTripwireTriggered,
    RunConfig,
    RunContextWrapper,
    Runner,
    Tool,
    ToolApprovalItem,
)
from agents.items import TResponseInputItem
from agents.tool import (
    CodeInterpreterTool,
    FileSearchTool,
    HostedMCPTool,
    ImageGenerationTool,
    WebSearchTool,
    maybe_invoke_function_tool_failure_error_function,
    resolve_function_tool_failure_error_function,
    set_function_tool_failure_error_function,
)
from agents.tool_context import ToolContext
from dex_agents import (
    AgentToolCall,
    AgentTurnContext,
    ContinueTurn,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    ModelStepOutcome,
    ToolCallsRequested,
    ToolCallStatus,
    ToolExecutionError,
    ToolExecutionResult,
    ToolInputRequired,
    TurnCompleted,
    describe_tool_call_outcome,
)

from dex_agents_openai_agents._graph import agent_after, agent_graph, check_handoffs, clone_graph
from dex_agents_openai_agents._guard import CallBudget, guarded_run_config
from dex_agents_openai_agents._items import (
    decode_run_state,
    encode_run_state,
    framework_messages,
    guardrail_note,
    input_items,
    user_message,
)
from dex_agents_openai_agents._policies import resolve_policy
from dex_agents_openai_agents._streaming import forward_deltas

DEFAULT_MAX_TURNS = 10_000
"""The SDK's ``max_turns`` for each step: Dex owns the loop, so the SDK's cap is out of the way."""

# Raised by a tool for the session itself: the SDK's error handling must not turn them
# into model-visible text.
_PASSED_THROUGH = (ToolExecutionError, ToolInputRequired)

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

    Prompts, tools, handoffs, guardrails, model and model settings stay the agent's own.
    Each RunModel Step runs the SDK's ``Runner.run_streamed`` for exactly one model call:
    every function tool is marked as needing approval in a per-step copy of the agents, so
    the SDK stops with its interruptions instead of running tools; the adapter returns
    them as deferred calls and the serialized ``RunState`` as run state. After the tool
    Steps, the state is restored, every call is approved (its copy then returns the
    recorded result instead of running the tool) or rejected natively with the rejection
    text, and the SDK makes the next model call. A second model call in one step fails
    the attempt.

    Handoffs: the run stops at the handoff, before the receiving agent's model call, and
    continues in the next RunModel Step of the same turn from the run state, which names
    the active agent. A new turn starts with the agent the previous turn ended with (the
    SDK's ``result.last_agent``), or with ``agent`` when ``start_turns_with`` is
    ``"starting_agent"``.

    Guardrails: an input or output guardrail tripwire ends the turn at once, without a
    retry, with an assistant message naming the guardrail (what a plain run raises); the
    model does not see that turn again.

    Function tools (``@function_tool`` and tools from MCP servers) are deferred: each call
    is its own Step. Hosted tools (web search, file search, code interpreter, image
    generation, hosted MCP), input and output guardrails and ``on_handoff`` callbacks run
    inside the model Step, so a RunModel retry may run them again (at-least-once).

    Args:
        agent: the user's agent, the first agent of a session. Its name, tools and
            handoffs (and those of every agent it hands off to) must stay the same while a
            session waits for tool calls (the run state names them).
        run_config: the SDK ``RunConfig`` for every step (model provider, model override,
            model settings); default ``RunConfig(tracing_disabled=True)``. A config you
            pass is used as is (set ``tracing_disabled`` there as you need).
        context_factory: returns the app context object (``RunContextWrapper.context``)
            for each step and each tool call; default: None as context. It runs on the
            Worker, so it may open clients; a mapping context is stored in the run state
            (the SDK serializes it), any other object is left out.
        max_turns: the SDK's ``max_turns`` per step (default 10,000).
        start_turns_with: ``"last_agent"`` (default) starts each turn with the agent the
            previous turn ended with, as the SDK's docs do with ``result.last_agent``;
            ``"starting_agent"`` starts every turn with ``agent``.

    Raises:
        ValueError: local tools the SDK runs with its own executors (shell, computer,
            apply-patch, custom tools), which cannot be deferred; handoffs with an
            ``input_filter`` or ``nest_handoff_history`` (they rewrite the stored
            conversation); two agents with one name, or one tool name for two different
            tools; an unknown ``start_turns_with``.

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
        start_turns_with: Literal["last_agent", "starting_agent"] = "last_agent",
    ) -> None:
        if start_turns_with not in ("last_agent", "starting_agent"):
            raise ValueError(
                f"start_turns_with must be 'last_agent' or 'starting_agent', "
                f"got {start_turns_with!r}"
            )
        self.agent = agent
        self.run_config = run_config if run_config is not None else RunConfig(tracing_disabled=True)
        self.context_factory = context_factory
        self.max_turns = max_turns
        self.start_turns_with = start_turns_with
        self._agents = agent_graph(agent)
        self._by_agent_name = {member.name: member for member in self._agents}
        check_handoffs(self._agents, self.run_config)
        for member in self._agents:
            for tool in member.tools:
                _check_deferrable(tool)
        _by_name([tool for member in self._agents for tool in member.tools], strict=True)

    # ------------------------------------------------------------------ contract

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Return the user message as a Responses input item."""
        return user_message(text)

    async def run_model_step(self, turn: AgentTurnContext) -> ModelStepOutcome:
        """Let the SDK make one model call and stop before any function tool or handoff."""
        context = self._new_context()
        tools = await self._tools_by_agent(context)
        recorded = _recorded_outputs(turn.tool_calls)
        budget = CallBudget()
        copies = clone_graph(
            self._agents,
            lambda member: self._step_copy(member, tools[member.name], recorded, budget),
        )
        run_config = guarded_run_config(self.run_config, budget)
        stored = input_items(turn.messages)
        starting = copies[self._turn_start(stored).name]
        if turn.framework_run_state is None:
            result = Runner.run_streamed(
                starting, stored, context=context, max_turns=self.max_turns, run_config=run_config
            )
        else:
            state = await decode_run_state(starting, turn.framework_run_state, context=context)
            for item in state.get_interruptions():
                _answer(state, item, turn)
            result = Runner.run_streamed(
                starting, state, context=context, max_turns=self.max_turns, run_config=run_config
            )
        handed_off = False

        def stop_at_handoff() -> None:
            # An agent change after this step's model call is a handoff: stop before the
            # receiving agent's call, which the next RunModel Step makes.
            nonlocal handed_off
            if budget.finished and not handed_off:
                handed_off = True
                result.cancel(mode="after_turn")

        try:
            await forward_deltas(result, turn.events, stop_at_handoff)
        except (InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered) as exc:
            note = guardrail_note(exc, turn.tool_calls.values())
            return TurnCompleted(new_messages=[note], usage=budget.usage())
        usage = budget.usage()
        all_tools = [tool for member_tools in tools.values() for tool in member_tools]
        if result.interruptions:
            calls = [
                await self._deferred_call(turn, item, all_tools, context)
                for item in result.interruptions
            ]
            return ToolCallsRequested(
                framework_run_state=encode_run_state(result.to_state()),
                tool_calls=calls,
                usage=usage,
            )
        if handed_off:
            return ContinueTurn(
                framework_run_state=encode_run_state(result.to_state()),
                usage=usage,
                reason="handoff",
            )
        new_items = result.to_input_list()[len(stored) :]
        return TurnCompleted(new_messages=framework_messages(new_items), usage=usage)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run the real function tool once, through its own ``on_invoke_tool``.

        An exception the tool's ``failure_error_function`` handles (the SDK's default one
        included) is what a plain run shows the model: the call is recorded ``failed``
        with that text and is not retried. A tool built with
        ``failure_error_function=None`` raises instead: the Step fails and the effect's
        retry policy applies (reads and idempotent writes retry). ``ToolExecutionError``
        from a tool is a failure the model sees, recorded with its own message.
        """
        record = call.tool_call
        context = self._new_context()
        tools = await self._tools_by_agent(context)
        owner, tool = _owner_of(record.tool_name, tools)
        if tool is None:
            raise ToolExecutionError(f"unknown tool {record.tool_name!r}")
        tool_context = ToolContext(
            context=context,
            tool_name=record.tool_name,
            tool_call_id=record.tool_call_id,
            tool_arguments=record.arguments,
            agent=self._by_agent_name.get(owner, self.agent),
            run_config=self.run_config,
        )
        runnable = copy.copy(tool)
        handled: list[BaseException] = []
        if resolve_function_tool_failure_error_function(tool, tool_context) is not None:

            async def noted(context: RunContextWrapper[Any], error: Exception) -> str:
                handled.append(error)
                if isinstance(error, _PASSED_THROUGH):
                    return ""
                text = await maybe_invoke_function_tool_failure_error_function(
                    function_tool=tool, context=context, error=error
                )
                return text or ""

            set_function_tool_failure_error_function(runnable, noted)
        try:
            output = await runnable.on_invoke_tool(tool_context, record.arguments)
        except ModelBehaviorError as exc:
            # The model sent arguments the tool's schema refuses: a retry would not help.
            raise ToolExecutionError(str(exc)) from exc
        if handled:
            error = handled[-1]
            if isinstance(error, _PASSED_THROUGH):
                raise error
            raise ToolExecutionError(_output_text(output)) from error
        return ToolExecutionResult(output=_output_text(output))

    # ------------------------------------------------------------------ helpers

    def _new_context(self) -> Any:
        return self.context_factory() if self.context_factory is not None else None

    def _turn_start(self, stored: list[TResponseInputItem]) -> Agent[Any]:
        if self.start_turns_with == "starting_agent":
            return self.agent
        plain = [cast(Mapping[str, Any], item) for item in stored]
        return agent_after(self.agent, self._by_agent_name, plain)

    async def _tools_by_agent(self, context: Any) -> dict[str, list[Tool]]:
        wrapper = RunContextWrapper(context=context)
        tools: dict[str, list[Tool]] = {}
        for member in self._agents:
            mcp_tools = await member.get_mcp_tools(wrapper)
            for tool in mcp_tools:
                _check_deferrable(tool)
            tools[member.name] = [*member.tools, *mcp_tools]
        return tools

    def _step_copy(
        self,
        member: Agent[Any],
        tools: list[Tool],
        recorded: Mapping[str, str],
        budget: CallBudget,
    ) -> Agent[Any]:
        step_tools = [
            _replaying_copy(tool, recorded) if isinstance(tool, FunctionTool) else tool
            for tool in tools
        ]
        changes: dict[str, Any] = {"tools": step_tools, "mcp_servers": []}
        model = budget.guard_model(member.model)
        if model is not None:
            changes["model"] = model
        return member.clone(**changes)

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


def _owner_of(name: str, tools: Mapping[str, list[Tool]]) -> tuple[str, FunctionTool | None]:
    """The first agent (by name) with a function tool called ``name``, and that tool."""
    for agent_name, member_tools in tools.items():
        found = _by_name(member_tools).get(name)
        if found is not None:
            return agent_name, found
    return "", None


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


def _by_name(tools: list[Tool], *, strict: bool = False) -> dict[str, FunctionTool]:
    """Function tools by name, the first of each name (``strict``: refuse a second one)."""
    found: dict[str, FunctionTool] = {}
    for tool in tools:
        if not isinstance(tool, FunctionTool):
            continue
        other = found.setdefault(tool.name, tool)
        if strict and other is not tool:
            raise ValueError(
                f"two different tools are named {tool.name!r}: a tool call names only its "
                "tool, so give each tool of the agents reachable through handoffs its own name"
            )
    return found


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
