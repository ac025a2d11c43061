"""``PydanticAIRunner``: runs a user's Pydantic AI agent as a durable dex-agents session."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic

from dex_agents import (
    AgentTurnContext,
    AgentTurnOutcome,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    MessageRole,
    ToolCallsRequested,
    ToolExecutionError,
    ToolExecutionResult,
    TurnCompleted,
)
from pydantic_ai import Agent, CallToolsNode, ModelRequestNode
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.tools import (
    AgentDepsT,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDefinition,
)
from pydantic_graph import End

from dex_agents_pydantic_ai._items import (
    RunState,
    deferred_results,
    dump_message,
    history_of,
    to_framework_message,
    usage_of,
    user_request,
    with_approved_arguments,
)
from dex_agents_pydantic_ai._policies import resolve_policy
from dex_agents_pydantic_ai._streaming import forward_stream_event


class MultipleModelCallsError(RuntimeError):
    """The framework wanted a second model call inside one RunModel Step.

    Pydantic AI does this by itself when every tool call of a response had invalid
    arguments, or on output-validation and empty-response retries. The contract allows
    one model call per Step, so the attempt fails and RunModel retries the one call.
    """


class _DeferEveryTool(AbstractCapability[Any]):
    """Per-run capability: defers every function tool the framework would run.

    It also records the tool definitions the run offered, so policies can read their
    metadata. A call approved through ``DeferredToolResults`` passes, which is how
    ``execute_deferred_tool_call`` runs one tool through the agent's own pipeline.
    """

    def __init__(self) -> None:
        super().__init__()
        self.tool_defs: dict[str, ToolDefinition] = {}

    async def prepare_tools(
        self, ctx: RunContext[Any], tool_defs: list[ToolDefinition]
    ) -> list[ToolDefinition]:
        for tool_def in tool_defs:
            self.tool_defs[tool_def.name] = tool_def
        return tool_defs

    async def before_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
    ) -> Any:
        if ctx.tool_call_approved:
            return args
        raise CallDeferred()


class PydanticAIRunner(Generic[AgentDepsT]):
    """Attach an existing Pydantic AI ``Agent`` to a durable dex-agents session.

    Use it with ``AgentSessionFlow(PydanticAIRunner(agent), flow_type=..., options=...)``.
    The agent keeps its model, instructions, tools and toolsets; the runner adds, per run,
    a capability that defers every function tool call to the session (Pydantic AI's
    ``CallDeferred``) and feeds recorded results back through ``DeferredToolResults``, so
    each model call is one RunModel Step and each tool call its own Step.

    Args:
        agent: the user's agent. Give it ``instructions=`` rather than ``system_prompt=``:
            the history is rebuilt from storage on every call, and Pydantic AI only adds
            system prompts to a run that starts without history.
        deps_factory: builds the agent's ``deps`` for every model call and tool call
            (deps are not stored); None passes no deps.

    Raises:
        MultipleModelCallsError: from ``run_model_step`` when the framework wants a
            second model call in the same Step (see the class).

    Concurrency: stateless between calls; ``execute_deferred_tool_call`` may run
    concurrently with itself, each call in its own agent run.

    """

    def __init__(
        self,
        agent: Agent[AgentDepsT, Any],
        *,
        deps_factory: Callable[[], AgentDepsT] | None = None,
    ) -> None:
        self.agent = agent
        self.deps_factory = deps_factory

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Wrap user text as a ``ModelRequest`` with one ``UserPromptPart``."""
        return FrameworkMessage(
            role=MessageRole.USER, framework_item=dump_message(user_request(text)), text=text
        )

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Let the agent make one model call for ``turn``, deferring every tool call."""
        history = history_of(turn.messages)
        earlier: list[ModelMessage] = []
        results: DeferredToolResults | None = None
        if turn.framework_run_state is not None:
            state = RunState.load(turn.framework_run_state)
            earlier = with_approved_arguments(state.messages, turn.tool_calls)
            results = deferred_results(state.deferred, turn.tool_calls)
        capability = _DeferEveryTool()
        model_input = [*history, *earlier]
        async with self.agent.iter(
            None,
            message_history=model_input,
            deferred_tool_results=results,
            output_type=self._output_type(),
            capabilities=[capability],
            deps=self._deps(),
        ) as run:
            node: Any = run.next_node
            model_calls = 0
            while not isinstance(node, End):
                if isinstance(node, ModelRequestNode):
                    if model_calls == 1:
                        raise MultipleModelCallsError(
                            "the agent asked for a second model call in one RunModel Step "
                            "(invalid tool arguments or an output retry)"
                        )
                    model_calls += 1
                    async with node.stream(run.ctx) as stream:
                        async for event in stream:
                            forward_stream_event(turn.events, event)
                elif isinstance(node, CallToolsNode):
                    await turn.heartbeat()
                node = await run.next(node)
            produced = [*earlier, *run.all_messages()[len(model_input) :]]
            output = node.data.output
        responses = [m for m in produced[len(earlier) :] if isinstance(m, ModelResponse)]
        usage = usage_of(responses[-1] if model_calls and responses else None)
        if not isinstance(output, DeferredToolRequests):
            return TurnCompleted(
                new_messages=[to_framework_message(m) for m in produced], usage=usage
            )
        pending = {call.tool_call_id for call in [*output.calls, *output.approvals]}
        ordered = [
            part
            for part in _last_response(produced).parts
            if isinstance(part, ToolCallPart) and part.tool_call_id in pending
        ]
        defs = capability.tool_defs
        calls = [
            DeferredToolCall(
                tool_call_id=part.tool_call_id,
                tool_name=part.tool_name,
                arguments=part.args_as_json_str(),
                policy=resolve_policy(turn, part.tool_name, defs.get(part.tool_name)),
            )
            for part in ordered
        ]
        state = RunState(messages=produced, deferred=[call.tool_call_id for call in calls])
        return ToolCallsRequested(framework_run_state=state.dump(), tool_calls=calls, usage=usage)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run one approved call through the agent's own tool pipeline, once.

        The tool sees validated arguments, its ``RunContext`` (with a two-message history
        holding only this call) and the agent's hooks. ``ToolFailed``, ``ModelRetry`` and
        invalid arguments become ``ToolExecutionError`` (recorded failed, not retried);
        any other exception fails the Step and follows the effect's retry policy.
        """
        record = call.tool_call
        tool_call = ToolCallPart(
            record.tool_name, record.arguments or "{}", tool_call_id=record.tool_call_id
        )
        history: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart("")]),
            ModelResponse(parts=[tool_call]),
        ]
        approved = DeferredToolResults(approvals={record.tool_call_id: ToolApproved()})
        async with self.agent.iter(
            None,
            message_history=history,
            deferred_tool_results=approved,
            output_type=self._output_type(),
            capabilities=[_DeferEveryTool()],
            deps=self._deps(),
        ) as run:
            node: Any = run.next_node
            while not isinstance(node, End | ModelRequestNode):
                node = await run.next(node)
            returned = _tool_return(run.all_messages(), node, record.tool_call_id)
        if returned is None:
            raise ToolExecutionError(f"the agent produced no result for {record.tool_name!r}")
        text = returned.model_response_str(wrap_if_error=False)
        if returned.outcome != "success":
            raise ToolExecutionError(text or returned.outcome)
        return ToolExecutionResult(output=text)

    def _deps(self) -> Any:
        return self.deps_factory() if self.deps_factory is not None else None

    def _output_type(self) -> Any:
        # Agents that declare DeferredToolRequests themselves (required with output
        # validators) keep their own output type.
        declared = self.agent.output_type
        options: Sequence[Any] = declared if isinstance(declared, list | tuple) else [declared]
        if DeferredToolRequests in options:
            return None
        return [*options, DeferredToolRequests]


def _last_response(messages: Sequence[ModelMessage]) -> ModelResponse:
    for message in reversed(messages):
        if isinstance(message, ModelResponse):
            return message
    raise ValueError("the run deferred tool calls without a model response")


def _tool_return(
    messages: Sequence[ModelMessage], node: object, tool_call_id: str
) -> ToolReturnPart | None:
    candidates: list[ModelMessage] = list(messages)
    if isinstance(node, ModelRequestNode):
        candidates.append(node.request)
    for message in reversed(candidates):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, ToolReturnPart) and part.tool_call_id == tool_call_id:
                    return part
    return None
