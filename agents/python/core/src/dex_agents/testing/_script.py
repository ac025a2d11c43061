"""The script of a scripted model: what it answers, call by call, turn by turn."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from dex_agents import AgentMessage, AgentUsage, ToolCallStatus, ToolEffect

_TURN_NUMBER = re.compile(r"turn-(\d+)$")

DERIVE_USAGE: Literal["derive"] = "derive"
"""``usage`` of a scripted response that derives its usage from the text lengths."""

ScriptedUsage: TypeAlias = AgentUsage | Literal["derive"] | None


@dataclass(frozen=True, kw_only=True)
class ScriptedToolCall:
    """One tool call a scripted model response requests.

    Args:
        tool_name: the tool to call (a key of the runner's ``tools``).
        arguments: the call's JSON-object arguments (sent to the tool as keyword args).
        tool_call_id: the framework's call ID; None (default) makes
            ``"call-<model call index>-<position>"``. Tests of ID validation set bad IDs here.
        effect: framework metadata for ``resolve_tool_policy`` (like MCP ``readOnlyHint``);
            None (default) leaves the decision to the session options.

    """

    tool_name: str
    arguments: Mapping[str, Any] = field(default_factory=dict)
    tool_call_id: str | None = None
    effect: ToolEffect | None = None


@dataclass(frozen=True, kw_only=True)
class ScriptedText:
    """A final answer: the turn completes with this text.

    Args:
        text: the answer (streamed as one ``text_delta``, stored as an assistant message).
        usage: the usage reported for this model call; ``"derive"`` (default,
            :data:`DERIVE_USAGE`) derives one from the text lengths; None reports none
            (the session then leaves its total as it is).
        fail_attempts: on RunModel attempts ``1..fail_attempts`` stream the first half of
            ``text`` and then raise (default 0), to exercise RunModel retries.
        gate: a ``FileGate`` name to pass before answering (formatted with ``turn_id``,
            ``call_index`` and ``attempt``), for crash tests; None (default) passes none.

    """

    text: str
    usage: ScriptedUsage = DERIVE_USAGE
    fail_attempts: int = 0
    gate: str | None = None


@dataclass(frozen=True, kw_only=True)
class ScriptedToolCalls:
    """A response that asks for tool calls; the turn continues after their results.

    Args:
        calls: the calls, in model order.
        text: assistant text that came with the calls (stored with the turn), or None.
        usage, fail_attempts, gate: as for :class:`ScriptedText`.

    """

    calls: Sequence[ScriptedToolCall]
    text: str | None = None
    usage: ScriptedUsage = DERIVE_USAGE
    fail_attempts: int = 0
    gate: str | None = None


@dataclass(frozen=True, kw_only=True)
class ScriptedContinue:
    """A model call that ends with neither an answer nor tool calls (``ContinueTurn``).

    Like a handoff or a framework's validation retry: the turn goes on with another model
    call (call index one higher) in its own RunModel Step.

    Args:
        reason: the ``ContinueTurn.reason`` (default ``"handoff"``).
        text: assistant text of this call, kept with the turn's items, or None.
        usage, fail_attempts, gate: as for :class:`ScriptedText`.

    """

    reason: str = "handoff"
    text: str | None = None
    usage: ScriptedUsage = DERIVE_USAGE
    fail_attempts: int = 0
    gate: str | None = None


@dataclass(frozen=True, kw_only=True)
class ScriptedFailure:
    """A model call that always raises: after three attempts the turn fails.

    Args:
        message: the exception message.
        gate: as for :class:`ScriptedText`.

    """

    message: str = "the scripted model failed"
    gate: str | None = None


ScriptedResponse: TypeAlias = ScriptedText | ScriptedToolCalls | ScriptedContinue | ScriptedFailure


@dataclass(frozen=True, kw_only=True)
class ScriptedToolResult:
    """A tool call of the current turn and its final outcome, as the model sees it.

    Attributes:
        tool_call_id: the call's ID.
        tool_name: the tool.
        arguments: the arguments the call ran with (decoded JSON object): an approver's
            edit when there was one.
        status: the record's final status (succeeded, failed, rejected, outcome_unknown...).
        content: the model-visible text, from ``describe_tool_call_outcome``.

    """

    tool_call_id: str
    tool_name: str
    arguments: Mapping[str, Any]
    status: ToolCallStatus
    content: str


@dataclass(frozen=True, kw_only=True)
class ModelCall:
    """What a scripted response function sees for one model call.

    Attributes:
        flow_id: the session ID.
        turn_id: ``"turn-<n>"``.
        turn_number: ``n``.
        call_index: 0-based model call within the turn (one more after each tool batch
            and each :class:`ScriptedContinue`).
        attempt: the RunModel attempt (1-based).
        user_text: this turn's user message.
        messages: every stored message, in sequence order (earlier turns included).
        tool_results: this turn's tool results so far, in model order.

    """

    flow_id: str
    turn_id: str
    turn_number: int
    call_index: int
    attempt: int
    user_text: str
    messages: tuple[AgentMessage, ...]
    tool_results: tuple[ScriptedToolResult, ...]

    def result_of(self, tool_name: str) -> ScriptedToolResult | None:
        """Return the latest result of ``tool_name`` in this turn, or None."""
        for result in reversed(self.tool_results):
            if result.tool_name == tool_name:
                return result
        return None


ScriptedStep: TypeAlias = ScriptedResponse | str | Callable[[ModelCall], "ScriptedResponse | str"]


class ScriptedModel:
    """A fake model that answers from a script: one list of responses per turn.

    ``turns[n - 1][k]`` answers model call ``k`` (0-based) of turn ``n`` (``"turn-<n>"``).
    Each entry is a :class:`ScriptedText`, :class:`ScriptedToolCalls`,
    :class:`ScriptedContinue`, :class:`ScriptedFailure`, a plain string (a final text
    answer), or a function of :class:`ModelCall` returning one of those, so an answer can
    depend on tool results and earlier messages. The lookup depends only on the turn and
    call index, never on what ran before in this process, so a retry on another Worker gets
    the same answer.

    Args:
        turns: the script, one sequence of responses per turn.
        default: the answer for calls beyond the script; None (default) makes such a call
            raise ``LookupError`` (the attempt fails).

    """

    def __init__(
        self, turns: Sequence[Sequence[ScriptedStep]] = (), *, default: ScriptedStep | None = None
    ) -> None:
        self.turns = [list(turn) for turn in turns]
        self.default = default

    def respond(self, call: ModelCall) -> ScriptedResponse:
        """Return the scripted response for one model call.

        Raises:
            LookupError: the script has no entry for the call and there is no default.

        """
        step: ScriptedStep | None = self.default
        if 1 <= call.turn_number <= len(self.turns):
            responses = self.turns[call.turn_number - 1]
            if call.call_index < len(responses):
                step = responses[call.call_index]
        if step is None:
            raise LookupError(
                f"the scripted model has no response for {call.turn_id} call {call.call_index}"
            )
        resolved = step(call) if callable(step) else step
        return ScriptedText(text=resolved) if isinstance(resolved, str) else resolved


def turn_number(turn_id: str) -> int:
    """Return the ``n`` of ``"turn-<n>"`` (0 when the ID has another shape)."""
    match = _TURN_NUMBER.search(turn_id)
    return int(match.group(1)) if match else 0
