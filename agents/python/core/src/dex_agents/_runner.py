"""The runner contract: what a framework adapter implements and what it receives."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import msgspec

from dex_agents._enums import ToolEffect
from dex_agents._events import AgentEventWriter
from dex_agents._policy import AgentSessionOptions, ToolPolicy
from dex_agents._records import AgentMessage, AgentToolCall, AgentUsage, FrameworkMessage
from dex_agents._tool_input import ToolInputAnswer


class DeferredToolCall(msgspec.Struct, frozen=True):
    """One tool call the model asked for and the framework deferred to the session.

    Construct it positionally, ``DeferredToolCall(tool_call_id, tool_name, arguments,
    policy)``, or by keyword.

    Attributes:
        tool_call_id: non-empty, without ``/``, unique within the turn.
        tool_name: the tool's name.
        arguments: the arguments as the model produced them (usually JSON text).
        policy: from ``AgentTurnContext.resolve_tool_policy``.

    """

    tool_call_id: str
    tool_name: str
    arguments: str
    policy: ToolPolicy


class TurnCompleted(msgspec.Struct, frozen=True):
    """The model gave its final answer: ``TurnCompleted(new_messages, usage)``.

    Attributes:
        new_messages: every item the turn produced after its user message, in order,
            across all of its model calls; appended in one commit.
        usage: usage of this model call only; None (default) means the framework did not
            report any, and the session total stays as it is.

    """

    new_messages: list[FrameworkMessage]
    usage: AgentUsage | None = None


class ToolCallsRequested(msgspec.Struct, frozen=True):
    """The model asked for tools; the session runs them, then calls the runner again.

    Construct it as ``ToolCallsRequested(framework_run_state, tool_calls, usage)``.

    Attributes:
        framework_run_state: non-empty state that continues the turn after the tools.
        tool_calls: one per call, in model order (at least one).
        usage: usage of this model call only; None (default) means the framework did not
            report any, and the session total stays as it is.

    """

    framework_run_state: str
    tool_calls: list[DeferredToolCall]
    usage: AgentUsage | None = None


class ContinueTurn(msgspec.Struct, frozen=True):
    """The model call ended with neither a final answer nor tool calls; call the model again.

    Return it when the framework itself goes on to another model call of the same turn: a
    handoff to another agent, a validation retry the framework asks the model for, the
    next model node of a graph. The session commits it (run state and usage) and schedules
    another ``RunModel`` Step in the same turn, so every model call stays its own Step and
    a crash repeats only the call that had not finished. The next call receives
    ``framework_run_state`` as ``AgentTurnContext.framework_run_state`` (so ``is_resuming``
    is True) and the same ``tool_calls``. Beyond the seeds.

    Construct it as ``ContinueTurn(framework_run_state, usage, reason)``.

    Attributes:
        framework_run_state: non-empty state the next model call continues from.
        usage: usage of this model call only; None (default) means the framework did not
            report any. It adds to the session total like the other outcomes' usage.
        reason: a short label (at most ``MAX_CONTINUE_REASON_LENGTH`` characters), such as
            ``"handoff"``, ``"validation_retry"``, ``"guardrail"`` or ``"next_node"``;
            written on the ``turn_continued`` event ("" by default).

    A turn makes at most ``AgentSessionOptions.max_model_calls_per_turn`` model calls; the
    call after that limit fails the turn instead of calling the model.

    """

    framework_run_state: str
    usage: AgentUsage | None = None
    reason: str = ""


MAX_CONTINUE_REASON_LENGTH = 100

AgentTurnOutcome = TurnCompleted | ToolCallsRequested
"""The seeds' outcomes of a model call: a final answer, or tools to run."""

ModelStepOutcome = TurnCompleted | ToolCallsRequested | ContinueTurn
"""What ``run_model_step`` may return: an ``AgentTurnOutcome``, or ``ContinueTurn``
(beyond the seeds). A runner that never continues may annotate ``AgentTurnOutcome``."""


class ToolExecutionResult(msgspec.Struct, frozen=True):
    """A tool's output as the model should see it: ``ToolExecutionResult(output)``."""

    output: str


class ToolExecutionError(Exception):
    """Raise from ``execute_deferred_tool_call`` for a failure the model should see.

    The session records the call as ``failed`` with ``message`` and does not retry it.
    Any other exception is a Step failure and follows the effect's retry policy.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


Heartbeat = Callable[[], Awaitable[None]]


@dataclass(frozen=True)
class AgentTurnContext:
    """What ``run_model_step`` receives: the turn's committed state.

    Attributes:
        flow_id: the session ID.
        turn_id: ``"turn-<n>"``.
        attempt: the 1-based RunModel attempt.
        messages: every stored message in sequence order; the last user message belongs
            to this turn.
        framework_run_state: None for the turn's first model call, else the value of this
            turn's last ``ToolCallsRequested`` or ``ContinueTurn``.
        tool_calls: this turn's records by tool call ID; every one is final.
        events: writer bound to this turn, Step execution and attempt.
        heartbeat: records liveness (the session also heartbeats every 20 seconds).
        options: the session's options (for ``resolve_tool_policy``).

    """

    flow_id: str
    turn_id: str
    attempt: int
    messages: Sequence[AgentMessage]
    framework_run_state: str | None
    tool_calls: Mapping[str, AgentToolCall]
    events: AgentEventWriter
    heartbeat: Heartbeat
    options: AgentSessionOptions

    @property
    def is_resuming(self) -> bool:
        """Whether this model call continues the turn (after tool calls or ``ContinueTurn``)."""
        return self.framework_run_state is not None

    def recorded_tool_call(self, tool_call_id: str) -> AgentToolCall:
        """Return this turn's record of one tool call; ``KeyError`` if there is none."""
        return self.tool_calls[tool_call_id]

    def resolve_tool_policy(
        self,
        tool_name: str,
        framework_effect: ToolEffect | None = None,
        *,
        framework_requires_approval: bool | None = None,
    ) -> ToolPolicy:
        """Return the tool's policy: explicit, else framework metadata, else the default.

        ``framework_requires_approval`` is the framework's own approval decision for this
        call (a static flag, or a per-call function the adapter evaluated on the Worker);
        see ``AgentSessionOptions.resolve_tool_policy`` for how it combines with the policy.
        """
        return self.options.resolve_tool_policy(
            tool_name, framework_effect, framework_requires_approval=framework_requires_approval
        )


@dataclass(frozen=True)
class DeferredToolExecution:
    """What ``execute_deferred_tool_call`` receives.

    Attributes:
        flow_id: the session ID.
        tool_call: the call's record (approved, when it needed approval).
        idempotency_key: ``"<flow_id>/<turn_id>/<tool_call_id>"``, the same on every
            attempt; pass it to the service the tool writes to.
        attempt: the 1-based Step attempt.
        events: writer bound to the turn, this tool Step's execution and attempt.
        heartbeat: records liveness; long tools should call it.
        answers: answers a person gave to the questions this call asked so far (see
            ``ToolInputRequired``), in order; empty (default) before any question.
        framework_run_state: the ``framework_run_state`` of the ``ToolCallsRequested``
            that deferred this call (beyond the seeds), for frameworks whose tools read
            the agent's state (LangGraph ``InjectedState``); None when there is none.

    """

    flow_id: str
    tool_call: AgentToolCall
    idempotency_key: str
    attempt: int
    events: AgentEventWriter
    heartbeat: Heartbeat
    answers: Sequence[ToolInputAnswer] = ()
    framework_run_state: str | None = None


_CURRENT_TOOL_EXECUTION: ContextVar[DeferredToolExecution | None] = ContextVar(
    "dex_agents_current_tool_execution", default=None
)


def current_tool_execution() -> DeferredToolExecution | None:
    """Return the tool call this code runs for, or None outside a tool Step.

    Use it inside a tool function (called from ``execute_deferred_tool_call``, in the same
    task or a thread started with ``asyncio.to_thread``) to read the call's
    ``idempotency_key`` and pass it to the service the tool writes to, without changing the
    tool's signature. Each concurrent tool Step sees its own call.
    """
    return _CURRENT_TOOL_EXECUTION.get()


@contextmanager
def bind_tool_execution(call: DeferredToolExecution) -> Iterator[None]:
    """Make ``call`` what :func:`current_tool_execution` returns inside the block."""
    token = _CURRENT_TOOL_EXECUTION.set(call)
    try:
        yield
    finally:
        _CURRENT_TOOL_EXECUTION.reset(token)


@runtime_checkable
class AgentFrameworkRunner(Protocol):
    """The contract each framework adapter implements.

    The session calls these from Steps, so each call may run again after a crash or a
    retry: keep the runner stateless between calls and derive everything from the
    arguments. ``execute_deferred_tool_call`` may run concurrently with itself.
    """

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Return ``FrameworkMessage(role=MessageRole.USER, framework_item=..., text=text)``."""
        ...

    async def run_model_step(self, turn: AgentTurnContext) -> ModelStepOutcome:
        """Let the framework make at most one model call; never run a deferrable tool."""
        ...

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run the real tool once; raise ``ToolExecutionError`` for a model-visible failure."""
        ...
