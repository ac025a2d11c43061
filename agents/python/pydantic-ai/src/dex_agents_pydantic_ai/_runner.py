"""``PydanticAIRunner``: runs a user's Pydantic AI agent as a durable dex-agents session."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic

from dex_agents import (
    AgentEventWriter,
    AgentToolCall,
    AgentTurnContext,
    ContinueTurn,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    MessageRole,
    ModelStepOutcome,
    ToolCallsRequested,
    ToolExecutionError,
    ToolExecutionResult,
    TurnCompleted,
)
from pydantic_ai import Agent, CallToolsNode, ModelRequestNode
from pydantic_ai._output import OutputSchema
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.exceptions import CallDeferred
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartStartEvent,
    ToolCallPart,
    ToolReturnPart,
    UserContent,
    UserPromptPart,
)
from pydantic_ai.models.function import FunctionModel
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.tool_manager import ToolManager
from pydantic_ai.tools import (
    AgentDepsT,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    ToolApproved,
    ToolDefinition,
)
from pydantic_ai.toolsets import (
    AbstractToolset,
    ApprovalRequiredToolset,
    PrefixedToolset,
    RenamedToolset,
)
from pydantic_graph import End

from dex_agents_pydantic_ai._items import (
    RunState,
    deferred_results,
    dump_message,
    history_of,
    load_messages,
    system_message,
    to_framework_message,
    usage_of,
    user_request,
    with_approved_arguments,
)
from dex_agents_pydantic_ai._policies import resolve_policy
from dex_agents_pydantic_ai._streaming import forward_stream_event

VALIDATION_RETRY = "validation_retry"
"""The ``ContinueTurn.reason`` of a model call Pydantic AI answered with a retry request."""


class _DeferEveryTool(AbstractCapability[Any]):
    """Per-run capability: defers every function tool the framework would run.

    It also records the tool definitions the run offered, so policies can read their
    metadata, and, for each deferred call of a tool inside an ``ApprovalRequiredToolset``,
    what that toolset's approval function decided for it. A call approved through
    ``DeferredToolResults`` passes, which is how ``execute_deferred_tool_call`` runs one
    tool through the agent's own pipeline.
    """

    def __init__(
        self,
        allow: str | None = None,
        approval_toolsets: Sequence[ApprovalRequiredToolset[Any]] = (),
    ) -> None:
        super().__init__()
        self.allow = allow
        self.approval_toolsets = approval_toolsets
        self.tool_defs: dict[str, ToolDefinition] = {}
        self.approval_decisions: dict[str, bool] = {}

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
        if ctx.tool_call_approved or call.tool_call_id == self.allow:
            return args
        decision = await self._toolset_decision(ctx, call.tool_name, args)
        if decision is not None:
            self.approval_decisions[call.tool_call_id] = decision
        raise CallDeferred()

    async def _toolset_decision(
        self, ctx: RunContext[Any], tool_name: str, args: Any
    ) -> bool | None:
        # What ApprovalRequiredToolset.call_tool would decide for this call, asked now, when
        # the call is deferred; None when no such toolset holds the tool.
        decided: bool | None = None
        for toolset in self.approval_toolsets:
            tool = (await toolset.get_tools(ctx)).get(tool_name)
            if tool is None:
                continue
            if toolset.approval_required_func(ctx, tool.tool_def, args):
                return True
            decided = False
        return decided


class PydanticAIRunner(Generic[AgentDepsT]):
    """Attach an existing Pydantic AI ``Agent`` to a durable dex-agents session.

    Use it with ``AgentSessionFlow(PydanticAIRunner(agent), flow_type=..., options=...)``.
    The agent keeps its model, instructions, tools and toolsets; the runner adds, per run,
    a capability that defers every function tool call to the session (Pydantic AI's
    ``CallDeferred``) and feeds recorded results back through ``DeferredToolResults``, so
    each model call is one RunModel Step and each tool call its own Step.

    Args:
        agent: the user's agent, with any output type, ``instructions=``,
            ``system_prompt=`` / ``@agent.system_prompt`` (also ``dynamic=True``) and
            output validators. System prompts reach the model as in a plain multi-turn
            run: resolved once on the session's first request and stored as a ``system``
            message; dynamic ones are re-evaluated on every model call.
        deps_factory: builds the agent's ``deps`` for every model call and tool call
            (deps are not stored); None passes no deps.

    Each model call is its own RunModel Step. When Pydantic AI answers a model call with
    a retry request instead of running tools or ending the run (every tool call had
    invalid arguments, the output failed validation or an output validator raised
    ``ModelRetry``, the response was empty), the Step returns
    ``ContinueTurn(reason="validation_retry")`` and the next RunModel sends that request.
    The retry counts Pydantic AI keeps (each tool's ``max_retries``, the output's
    retries) travel in the run state, so a turn fails where the plain run would fail.

    Approval: a tool declared ``requires_approval=True`` always needs approval; for a tool
    inside an ``ApprovalRequiredToolset`` (``toolset.approval_required(fn)``) the function
    is called on the Worker, inside RunModel, when the call is deferred, and its answer is
    the ``framework_requires_approval`` of ``resolve_tool_policy`` (True: approval; False:
    no approval unless an explicit ``ToolPolicy`` requires it, see
    ``ToolPolicy.framework_may_waive_approval``).

    Raises:
        ValueError: at construction, an ``ApprovalRequiredToolset`` sits inside a
            ``PrefixedToolset`` or ``RenamedToolset`` (the names its function sees are not
            the names the model calls); apply ``approval_required`` outside them.

    Concurrency: stateless between calls; ``execute_deferred_tool_call`` may run
    concurrently with itself, each call in its own agent run.

    """

    def __init__(
        self,
        agent: Agent[AgentDepsT, Any],
        *,
        deps_factory: Callable[[], AgentDepsT] | None = None,
    ) -> None:
        self._approval_toolsets = _approval_toolsets(agent.toolsets)
        self.agent = agent
        self.deps_factory = deps_factory
        self._schema_copy: tuple[list[Any], Agent[AgentDepsT, Any]] | None = None

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Wrap user text as a ``ModelRequest`` with one ``UserPromptPart``."""
        return FrameworkMessage(
            role=MessageRole.USER, framework_item=dump_message(user_request(text)), text=text
        )

    async def run_model_step(self, turn: AgentTurnContext) -> ModelStepOutcome:
        """Let the agent make one model call for ``turn``, deferring every tool call."""
        prior, prompt, user_item = _split_turn(turn)
        earlier: list[ModelMessage] = []
        results: DeferredToolResults | None = None
        carried = _Retries()
        if turn.framework_run_state is not None:
            state = RunState.load(turn.framework_run_state, user_item)
            earlier = with_approved_arguments(state.messages, turn.tool_calls)
            if state.deferred:
                results = deferred_results(state.deferred, turn.tool_calls)
            carried = _Retries(state.tool_retries, state.output_retries)
        capability = _DeferEveryTool(approval_toolsets=self._approval_toolsets)
        # The turn's first call gives Pydantic AI the user prompt itself, as a plain run
        # does: it builds the request (system prompts on a session's first request) and
        # merges it with a trailing tool-return request of the previous turn. Later calls
        # continue from that request, which the run state keeps as Pydantic AI built it.
        async with self._agent_for_run().iter(
            None if earlier else prompt,
            message_history=[*prior, *earlier] or None,
            deferred_tool_results=results,
            output_type=self._output_type(),
            capabilities=[capability],
            deps=self._deps(),
        ) as run:
            run.ctx.state.output_retries_used = carried.output
            node: Any = run.next_node
            model_calls = 0
            retry: _Retries | None = None
            while not isinstance(node, End):
                if isinstance(node, ModelRequestNode):
                    if model_calls == 1:
                        # Pydantic AI asks the model again (a retry request): that call is
                        # the next RunModel Step's.
                        retry = _retries_after_step(run.ctx.deps.tool_manager, run.ctx.state)
                        break
                    model_calls += 1
                    if _streams(run.ctx.deps.model):
                        async with node.stream(run.ctx) as stream:
                            async for event in stream:
                                forward_stream_event(turn.events, event)
                    else:
                        node = await run.next(node)
                        _forward_response(turn.events, node)
                        continue
                elif isinstance(node, CallToolsNode):
                    _restore_tool_retries(run.ctx.deps.tool_manager, carried.tools)
                    await turn.heartbeat()
                node = await run.next(node)
            produced = [*earlier, *run.new_messages()]
            output = None if retry is not None else node.data.output
        responses = [m for m in produced[len(earlier) :] if isinstance(m, ModelResponse)]
        usage = usage_of(responses[-1] if model_calls and responses else None)
        if retry is not None:
            state = RunState(
                messages=[*produced, node.request],
                deferred=[],
                tool_retries=retry.tools,
                output_retries=retry.output,
            )
            return ContinueTurn(state.dump(), usage, VALIDATION_RETRY)
        if not isinstance(output, DeferredToolRequests):
            return TurnCompleted(new_messages=_stored_turn(produced), usage=usage)
        pending = {call.tool_call_id for call in [*output.calls, *output.approvals]}
        asked = {call.tool_call_id for call in output.approvals}
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
                policy=resolve_policy(
                    turn,
                    part.tool_name,
                    defs.get(part.tool_name),
                    True
                    if part.tool_call_id in asked
                    else capability.approval_decisions.get(part.tool_call_id),
                ),
            )
            for part in ordered
        ]
        state = RunState(messages=produced, deferred=[call.tool_call_id for call in calls])
        return ToolCallsRequested(framework_run_state=state.dump(), tool_calls=calls, usage=usage)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run one call through the agent's own tool pipeline, once.

        The tool sees validated arguments, its ``RunContext`` (with a two-message history
        holding only this call) and the agent's hooks. ``ctx.tool_call_approved`` is True
        only when the session approved the call (its policy required approval). A tool
        that raises ``ApprovalRequired`` without such an approval (itself, or through an
        ``ApprovalRequiredToolset`` whose function now answers otherwise than when the
        call was deferred) is not run past that point: it becomes ``ToolExecutionError``
        naming the fix. ``ToolFailed``, ``ModelRetry`` and invalid arguments become
        ``ToolExecutionError`` (recorded failed, not retried); any other exception fails
        the Step and follows the effect's retry policy.
        """
        record = call.tool_call
        returned = await self._run_tool(record, approved=record.requires_approval)
        if isinstance(returned, _AskedForApproval):
            raise ToolExecutionError(
                f"tool {record.tool_name!r} raised ApprovalRequired, but its policy "
                "does not require approval, so it was not run; declare it with "
                "requires_approval=True or give it "
                "ToolPolicy(<effect>, requires_approval=True)"
            )
        if returned is None:
            raise ToolExecutionError(f"the agent produced no result for {record.tool_name!r}")
        text = returned.model_response_str(wrap_if_error=False)
        if returned.outcome != "success":
            raise ToolExecutionError(text or returned.outcome)
        return ToolExecutionResult(output=text)

    async def _run_tool(
        self, record: AgentToolCall, *, approved: bool
    ) -> ToolReturnPart | _AskedForApproval | None:
        tool_call = ToolCallPart(
            record.tool_name, record.arguments or "{}", tool_call_id=record.tool_call_id
        )
        history: list[ModelMessage] = [
            ModelRequest(parts=[UserPromptPart("")]),
            ModelResponse(parts=[tool_call]),
        ]
        results = (
            DeferredToolResults(approvals={record.tool_call_id: ToolApproved()})
            if approved
            else None
        )
        capability = _DeferEveryTool(allow=record.tool_call_id)
        async with self._agent_for_run().iter(
            None,
            message_history=history,
            deferred_tool_results=results,
            output_type=self._output_type(),
            capabilities=[capability],
            deps=self._deps(),
        ) as run:
            node: Any = run.next_node
            while not isinstance(node, End | ModelRequestNode):
                node = await run.next(node)
            if isinstance(node, End) and isinstance(node.data.output, DeferredToolRequests):
                if any(p.tool_call_id == record.tool_call_id for p in node.data.output.approvals):
                    return _AskedForApproval()
            return _tool_return(run.all_messages(), node, record.tool_call_id)

    def _deps(self) -> Any:
        return self.deps_factory() if self.deps_factory is not None else None

    def _needs_own_schema(self) -> bool:
        # Pydantic AI refuses a run-time output type when the agent has output validators;
        # such an agent runs as a copy whose own schema also allows deferred tools.
        return bool(self.agent._output_validators) and not _allows_deferred(self.agent)

    def _agent_for_run(self) -> Agent[AgentDepsT, Any]:
        if not self._needs_own_schema():
            return self.agent
        declared = _declared_outputs(self.agent)
        if self._schema_copy is None or self._schema_copy[0] != declared:
            copied = copy.copy(self.agent)
            schema = OutputSchema.build([*declared, DeferredToolRequests])
            copied._output_schema = schema
            copied._output_toolset = schema.toolset
            self._schema_copy = (declared, copied)
        return self._schema_copy[1]

    def _output_type(self) -> Any:
        # Agents that allow DeferredToolRequests themselves keep their own output type.
        if _allows_deferred(self.agent) or self._needs_own_schema():
            return None
        return [*_declared_outputs(self.agent), DeferredToolRequests]


@dataclass(frozen=True)
class _AskedForApproval:
    """The unapproved run stopped because the call asked for approval."""


@dataclass(frozen=True)
class _Retries:
    # Pydantic AI's retry counts as the next model call's step starts with them.
    tools: dict[str, int] = field(default_factory=dict)
    output: int = 0


def _retries_after_step(tool_manager: ToolManager[Any], state: Any) -> _Retries:
    # The carry-over ToolManager.for_run_step makes into the next step: failed tools count
    # one more, tools that succeeded start again.
    ctx = tool_manager.ctx
    counts = dict(ctx.retries) if ctx is not None else {}
    carried = {n: c for n, c in counts.items() if n not in tool_manager.succeeded_tools}
    carried.update({n: counts.get(n, 0) + 1 for n in tool_manager.failed_tools})
    return _Retries(carried, int(state.output_retries_used))


def _restore_tool_retries(tool_manager: ToolManager[Any], counts: Mapping[str, int]) -> None:
    # The first step of a continued run starts from no counts; give it the carried ones
    # before its tool calls are validated, so max_retries holds across model calls.
    ctx = tool_manager.ctx
    if ctx is None:
        return
    for name, count in counts.items():
        ctx.retries.setdefault(name, count)


def _declared_outputs(agent: Agent[Any, Any]) -> list[Any]:
    declared = agent.output_type
    return list(declared) if isinstance(declared, list | tuple) else [declared]


def _allows_deferred(agent: Agent[Any, Any]) -> bool:
    return DeferredToolRequests in _declared_outputs(agent)


def _streams(model: Any) -> bool:
    # A FunctionModel built without stream_function cannot stream; unwrap wrappers first.
    while isinstance(model, WrapperModel):
        model = model.wrapped
    return not (isinstance(model, FunctionModel) and model.stream_function is None)


def _forward_response(events: AgentEventWriter, node: object) -> None:
    response = getattr(node, "model_response", None)
    if isinstance(response, ModelResponse):
        for part in response.parts:
            forward_stream_event(events, PartStartEvent(index=0, part=part))


def _split_turn(
    turn: AgentTurnContext,
) -> tuple[list[ModelMessage], str | Sequence[UserContent], Any]:
    """The history before this turn's user message, its prompt, and its stored item."""
    for index in range(len(turn.messages) - 1, -1, -1):
        if turn.messages[index].role is MessageRole.USER:
            request = load_messages([turn.messages[index].framework_item])[0]
            prompts = [p.content for p in request.parts if isinstance(p, UserPromptPart)]
            prompt: str | Sequence[UserContent]
            if len(prompts) == 1 and isinstance(prompts[0], str):
                prompt = prompts[0]
            else:
                prompt = [c for p in prompts for c in ([p] if isinstance(p, str) else p)]
            return history_of(turn.messages[:index]), prompt, turn.messages[index].framework_item
    raise ValueError("the turn has no user message")


def _stored_turn(produced: Sequence[ModelMessage]) -> list[FrameworkMessage]:
    """What a completed turn stores: everything after its request, and its system prompt."""
    first = produced[0] if produced else None
    if not (isinstance(first, ModelRequest) and _has_prompt(first)):
        return [to_framework_message(m) for m in produced]
    system = system_message(first)
    stored = [to_framework_message(m) for m in produced[1:]]
    return [system, *stored] if system is not None else stored


def _has_prompt(message: ModelRequest) -> bool:
    return any(isinstance(part, UserPromptPart) for part in message.parts)


def _approval_toolsets(
    toolsets: Sequence[AbstractToolset[Any]], renamed_by: str | None = None
) -> list[ApprovalRequiredToolset[Any]]:
    """Every ``ApprovalRequiredToolset`` of the agent, outermost first.

    Raises:
        ValueError: one sits inside a toolset that renames tools.

    """
    found: list[ApprovalRequiredToolset[Any]] = []
    for toolset in toolsets:
        if isinstance(toolset, ApprovalRequiredToolset):
            if renamed_by is not None:
                raise ValueError(
                    f"an ApprovalRequiredToolset inside a {renamed_by} decides on tool names "
                    "the model never calls; apply approval_required(...) outside it, e.g. "
                    "toolset.prefixed('crm').approval_required(fn)"
                )
            found.append(toolset)
        inner_renamed = renamed_by
        if isinstance(toolset, PrefixedToolset | RenamedToolset):
            inner_renamed = type(toolset).__name__
        inner = getattr(toolset, "wrapped", None)
        if isinstance(inner, AbstractToolset):
            found.extend(_approval_toolsets([inner], inner_renamed))
        found.extend(_approval_toolsets(getattr(toolset, "toolsets", ()), inner_renamed))
    return found


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
