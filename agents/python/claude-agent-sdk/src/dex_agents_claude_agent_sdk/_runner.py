"""``ClaudeAgentRunner``: runs a Claude Agent SDK agent as a durable dex-agents session."""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    HookMatcher,
    ResultMessage,
    SdkMcpTool,
    TextBlock,
    ThinkingBlock,
    create_sdk_mcp_server,
)
from claude_agent_sdk.types import (
    HookContext,
    HookInput,
    HookJSONOutput,
    PreToolUseHookSpecificOutput,
)
from dex_agents import (
    AgentToolCall,
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
    is_approval_required,
)

from dex_agents_claude_agent_sdk._transcript import (
    RunState,
    TranscriptStore,
    deferral_last,
    recorded_session_id,
    to_framework_messages,
    transcript_of,
    unsent_user_text,
    with_tool_input,
)

DEFAULT_SERVER_NAME = "dex"
ONE_CALL_AT_A_TIME = (
    "Not run: this agent runs one of these tools per response. "
    "Ask for this call again after the previous call's result."
)
BUILTIN_APPROVED_OUTPUT = "approved; the CLI runs it in the next model step"

_SESSION_NAMESPACE = uuid.UUID("9a4f3a53-9f1c-4d0e-8a1e-3c6b1f2d7e55")


class ClaudeRunError(RuntimeError):
    """The CLI ended a model step without a usable result (error result or no result)."""


def cli_session_id(flow_id: str, attempt: int = 1) -> str:
    """The CLI session ID a dex-agents session starts under: a UUID derived from its Flow ID.

    A retried first model step (``attempt`` above 1) starts under an ID of its own: the
    CLI refuses to start a session whose ID an earlier, interrupted CLI run already used
    on that machine. Later steps resume the ID the stored transcript carries.
    """
    name = flow_id if attempt <= 1 else f"{flow_id}/attempt-{attempt}"
    return str(uuid.uuid5(_SESSION_NAMESPACE, name))


def tool_effect(tool: SdkMcpTool[Any]) -> ToolEffect | None:
    """The effect a custom tool's MCP annotations declare, or None.

    ``readOnlyHint`` gives ``READ``; ``idempotentHint`` gives ``IDEMPOTENT_WRITE``.
    """
    annotations = tool.annotations
    if annotations is None:
        return None
    if _hint(annotations, "readOnlyHint", "read_only_hint"):
        return ToolEffect.READ
    if _hint(annotations, "idempotentHint", "idempotent_hint"):
        return ToolEffect.IDEMPOTENT_WRITE
    return None


def _hint(annotations: object, wire_name: str, field_name: str) -> bool:
    # The SDK's ToolAnnotations exposes snake_case fields; a plain mapping uses the wire names.
    if isinstance(annotations, Mapping):
        return annotations.get(wire_name) is True
    return getattr(annotations, field_name, None) is True


def _allow(reason: str, updated_input: dict[str, Any] | None = None) -> HookJSONOutput:
    output: PreToolUseHookSpecificOutput = {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": reason,
    }
    if updated_input is not None:
        output["updatedInput"] = updated_input
    return {"hookSpecificOutput": output}


def _edited_input(record: AgentToolCall, proposed: object) -> dict[str, Any] | None:
    # The record holds the arguments the call runs with; None when the model's still stand.
    try:
        approved = json.loads(record.arguments) if record.arguments else {}
    except ValueError:
        return None
    if not isinstance(approved, dict) or approved == proposed:
        return None
    return approved


def _deny(reason: str) -> HookJSONOutput:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


_DEFER: HookJSONOutput = {
    "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "defer"}
}


class _Step:
    """Per model step: the PreToolUse hook and the replaying tool handlers.

    The CLI asks the hook before every tool call. The first custom tool call of a
    response (or a built-in the session must approve) is deferred, which stops the CLI
    run; later ones in the same response are refused with a note so the model asks
    again. On resume the CLI asks again for the deferred call; the hook allows it and
    the handler answers from the call's final record, never by running the tool.
    """

    def __init__(
        self,
        runner: ClaudeAgentRunner,
        turn: AgentTurnContext,
        resumed: RunState | None,
    ) -> None:
        self.runner = runner
        self.turn = turn
        self.resumed = resumed
        self.record: AgentToolCall | None = None
        if resumed is not None:
            self.record = turn.recorded_tool_call(resumed.deferred)
        self.deferred: tuple[str, str, dict[str, Any]] | None = None
        self.replayed = False

    async def pre_tool_use(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        name = str(data.get("tool_name", ""))
        arguments = data.get("tool_input", {})
        if self.resumed is not None and tool_use_id == self.resumed.deferred:
            record = self.record
            assert record is not None
            if not self.resumed.builtin:
                return _allow("recorded by the durable session")
            if record.status is not ToolCallStatus.SUCCEEDED:
                return _deny(describe_tool_call_outcome(record))
            # The transcript already shows an approver's edit; should the CLI still hold
            # the model's input, hand it the approved one.
            return _allow("approved in the durable session", _edited_input(record, arguments))
        custom = self.runner.custom_tool_name(name)
        if custom is None and not self.runner.builtin_needs_approval(self.turn, name):
            return {}
        if self.deferred is not None or tool_use_id is None:
            if custom is None:
                return _deny(ONE_CALL_AT_A_TIME)
            # Let the CLI call the stand-in handler, which answers with the refusal: a
            # hook denial in a resumed run leaves the deferred call without its result.
            return _allow("one deferred call per response")
        self.deferred = (tool_use_id, name, dict(arguments) if isinstance(arguments, dict) else {})
        return _DEFER

    def replay_handler(self, tool: SdkMcpTool[Any]) -> SdkMcpTool[Any]:
        async def replay(arguments: Any) -> dict[str, Any]:
            record = self.record
            if record is None or record.tool_name != tool.name or self.replayed:
                # Not the deferred call: a later call of the same response, never run.
                return {"content": [{"type": "text", "text": ONE_CALL_AT_A_TIME}], "is_error": True}
            self.replayed = True
            # The output, or the outcome in words; either names an approver's edit.
            text = describe_tool_call_outcome(record)
            if record.status is ToolCallStatus.SUCCEEDED:
                return {"content": [{"type": "text", "text": text}]}
            return {"content": [{"type": "text", "text": text}], "is_error": True}

        return dataclasses.replace(tool, handler=replay)


class ClaudeAgentRunner:
    """Attach a Claude Agent SDK agent to a durable dex-agents session.

    Use it with ``AgentSessionFlow(ClaudeAgentRunner(options, tools=[...]), ...)``.
    ``options`` is the agent's ``ClaudeAgentOptions`` (model, system prompt, built-in
    tools, hooks, external MCP servers, ...); ``tools`` are its custom tools, made with
    the SDK's ``@tool``. The runner serves them as one in-process MCP server named
    ``server_name`` (the model sees ``mcp__<server_name>__<tool>``) and defers every call
    through a PreToolUse hook that returns ``"defer"``: each model call is one RunModel
    Step and each custom tool call its own tool Step, which runs the real handler once
    under the tool's policy.

    The CLI keeps the conversation as a session transcript. The runner stores the
    transcript lines with the messages and hands them back through an in-memory
    ``session_store`` with ``resume`` on every model call, so any Worker continues any
    session, and a RunModel retry starts from the committed transcript.

    Built-in tools (Bash, Read, Edit, Write, ...) run inside the CLI, inside RunModel:
    they are at-least-once (a RunModel retry runs them again), and after one the CLI calls
    the model again within the same Step. A built-in named in the
    session's ``tool_policies`` with a policy that needs approval is deferred for the
    approval only: approved, the CLI runs it in the next model step; rejected, the model
    sees the rejection. An approver's edited arguments are written into the deferred
    call in the stored transcript, so a custom tool or a built-in runs with them and the
    model sees the call as it ran.

    Args:
        options: the agent's options. ``session_id``, ``resume``, ``session_store`` and
            ``continue_conversation`` are the runner's and must be left unset; its own
            PreToolUse hook runs before the agent's hooks.
        tools: the custom tools to defer (default none).
        server_name: name of the MCP server that serves ``tools`` (default ``"dex"``).

    Raises:
        ValueError: ``options`` sets a field the runner owns, ``server_name`` is already
            in ``options.mcp_servers``, or two tools share a name.
        ClaudeRunError: from ``run_model_step`` when the CLI reports an error result.

    Limits: one custom tool call per model response runs; the CLI refuses the rest of
    that response with a note, and the model asks again (its SDK defers one call per
    run). Concurrency: stateless between calls; every model step spawns its own CLI.

    """

    def __init__(
        self,
        options: ClaudeAgentOptions,
        *,
        tools: Sequence[SdkMcpTool[Any]] = (),
        server_name: str = DEFAULT_SERVER_NAME,
    ) -> None:
        for owned in ("session_id", "resume", "session_store"):
            if getattr(options, owned) is not None:
                raise ValueError(
                    f"ClaudeAgentOptions.{owned} is set by the runner; leave it unset "
                    f"(the session stores the conversation and resumes it on every model call)"
                )
        if options.continue_conversation:
            raise ValueError(
                "ClaudeAgentOptions.continue_conversation must stay False "
                "(the session stores the conversation and resumes it on every model call)"
            )
        if isinstance(options.mcp_servers, dict) and server_name in options.mcp_servers:
            raise ValueError(
                f"MCP server name {server_name!r} is already in options.mcp_servers; "
                f"pass another server_name="
            )
        self.options = options
        self.server_name = server_name
        self.tools: Mapping[str, SdkMcpTool[Any]] = {}
        by_name: dict[str, SdkMcpTool[Any]] = {}
        for tool in tools:
            if tool.name in by_name:
                raise ValueError(
                    f"two custom tools are named {tool.name!r}; give each its own name"
                )
            by_name[tool.name] = tool
        self.tools = by_name

    # ------------------------------------------------------------------ contract

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Store user text as it is; the CLI writes it into its transcript when sent."""
        return FrameworkMessage(role=MessageRole.USER, framework_item={"prompt": text}, text=text)

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Let the CLI make one model call for ``turn``, deferring custom tool calls."""
        resumed = RunState.load(turn.framework_run_state) if turn.framework_run_state else None
        history = transcript_of(turn.messages)
        earlier = resumed.entries if resumed is not None else []
        if resumed is not None:
            record = turn.recorded_tool_call(resumed.deferred)
            if record.arguments_edited:
                # The model, the CLI and the stored messages see the call as it ran.
                earlier = with_tool_input(earlier, resumed.deferred, _parse(record.arguments))
        store = TranscriptStore([*history, *earlier])
        step = _Step(self, turn, resumed)
        starts_session = not history and resumed is None
        if starts_session:
            session = cli_session_id(turn.flow_id, turn.attempt)
        else:
            session = recorded_session_id(store.initial) or cli_session_id(turn.flow_id)
        options = self._step_options(step, store, session, starts_session)
        result: ResultMessage | None = None
        responses: set[str] = set()
        async with ClaudeSDKClient(options) as client:
            if resumed is None:
                await client.query(unsent_user_text(turn.messages))
            async for message in client.receive_response():
                if isinstance(message, AssistantMessage):
                    _forward(turn, message)
                    if message.parent_tool_use_id is None:
                        responses.add(message.message_id or "")
                elif isinstance(message, ResultMessage):
                    result = message
                await turn.heartbeat()
        if result is None:
            raise ClaudeRunError("the CLI ended the model step without a result")
        if result.is_error and result.stop_reason != "tool_deferred":
            raise ClaudeRunError(f"the CLI reported {result.subtype}: {result.errors or ''}")
        entries = [*earlier, *store.appended]
        usage = _usage(result, max(len(responses), 1))
        if step.deferred is None:
            return TurnCompleted(new_messages=to_framework_messages(entries), usage=usage)
        tool_use_id, name, arguments = step.deferred
        custom = self.custom_tool_name(name)
        tool_name = custom if custom is not None else name
        entries = deferral_last(entries, tool_use_id)
        state = RunState(entries=entries, deferred=tool_use_id, builtin=custom is None)
        call = DeferredToolCall(
            tool_call_id=tool_use_id,
            tool_name=tool_name,
            arguments=_json(arguments),
            policy=self.tool_policy(turn, tool_name),
        )
        return ToolCallsRequested(framework_run_state=state.dump(), tool_calls=[call], usage=usage)

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run one custom tool's real handler once; a built-in only records its approval.

        A result with ``is_error`` becomes ``ToolExecutionError`` (recorded failed, not
        retried); an exception from the handler fails the Step and follows the effect's
        retry policy.
        """
        record = call.tool_call
        tool = self.tools.get(record.tool_name)
        if tool is None:
            return ToolExecutionResult(output=BUILTIN_APPROVED_OUTPUT)
        arguments = _parse(record.arguments)
        outcome = await tool.handler(arguments)
        text = _result_text(outcome)
        if outcome.get("is_error"):
            raise ToolExecutionError(text or f"{record.tool_name} reported an error")
        return ToolExecutionResult(output=text)

    # ------------------------------------------------------------------ policies

    def custom_tool_name(self, cli_name: str) -> str | None:
        """The custom tool a CLI tool name refers to, or None for any other tool."""
        prefix = f"mcp__{self.server_name}__"
        if cli_name.startswith(prefix) and cli_name[len(prefix) :] in self.tools:
            return cli_name[len(prefix) :]
        return None

    def tool_policy(self, turn: AgentTurnContext, tool_name: str) -> ToolPolicy:
        """A deferred call's policy: explicit, else the tool's MCP annotations, else default."""
        tool = self.tools.get(tool_name)
        return turn.resolve_tool_policy(tool_name, tool_effect(tool) if tool else None)

    def builtin_needs_approval(self, turn: AgentTurnContext, cli_name: str) -> bool:
        """Whether a built-in must wait for a durable approval: an explicit policy says so."""
        policy = turn.options.tool_policies.get(cli_name)
        return policy is not None and is_approval_required(policy)

    # ------------------------------------------------------------------ helpers

    def _step_options(
        self, step: _Step, store: TranscriptStore, session: str, starts_session: bool
    ) -> ClaudeAgentOptions:
        servers: dict[str, Any] = (
            dict(self.options.mcp_servers) if isinstance(self.options.mcp_servers, dict) else {}
        )
        if self.tools:
            wrapped = [step.replay_handler(tool) for tool in self.tools.values()]
            servers[self.server_name] = create_sdk_mcp_server(self.server_name, tools=wrapped)
        hooks = {key: list(value) for key, value in (self.options.hooks or {}).items()}
        hooks["PreToolUse"] = [
            HookMatcher(matcher=None, hooks=[step.pre_tool_use]),
            *hooks.get("PreToolUse", []),
        ]
        return dataclasses.replace(
            self.options,
            mcp_servers=servers
            if servers or isinstance(self.options.mcp_servers, dict)
            else self.options.mcp_servers,
            hooks=hooks,
            session_store=store,
            session_id=session if starts_session else None,
            resume=None if starts_session else session,
        )


def _forward(turn: AgentTurnContext, message: AssistantMessage) -> None:
    if message.parent_tool_use_id is not None:
        return
    for block in message.content:
        if isinstance(block, TextBlock) and block.text:
            turn.events.write_text_delta(block.text)
        elif isinstance(block, ThinkingBlock) and block.thinking:
            turn.events.write_reasoning_delta(block.thinking)


def _usage(result: ResultMessage, requests: int) -> AgentUsage | None:
    # One model call per step, unless built-ins ran inside the CLI and it called again.
    usage = result.usage
    if not usage:
        return None
    input_tokens = int(usage.get("input_tokens", 0) or 0)
    output_tokens = int(usage.get("output_tokens", 0) or 0)
    return AgentUsage(
        requests=requests,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _parse(arguments: str) -> dict[str, Any]:
    parsed = json.loads(arguments) if arguments else {}
    if not isinstance(parsed, dict):
        raise ToolExecutionError("the tool arguments are not a JSON object")
    return parsed


def _result_text(outcome: Mapping[str, Any]) -> str:
    content = outcome.get("content") or []
    return "\n".join(
        str(block.get("text", ""))
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    )
