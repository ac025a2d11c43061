"""Helpers the session's Steps and RPCs share: state access, events, tool call records."""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dex import AsyncContext, Context, Stream
from msgspec.structs import replace

from dex_agents._enums import AgentEventType, ToolCallStatus
from dex_agents._events import AgentEventWriter, new_event, start_heartbeats
from dex_agents._persistence import persistence
from dex_agents._policy import AgentSessionOptions
from dex_agents._records import (
    AgentEvent,
    AgentInterrupt,
    AgentMessage,
    AgentState,
    AgentToolCall,
    FrameworkMessage,
    ToolCallCompleted,
)
from dex_agents._runner import AgentFrameworkRunner
from dex_agents._text import message_sequence_key, validate_user_message


@dataclass(frozen=True, kw_only=True)
class SessionParts:
    """What every Step of one agent Flow needs: its runner, options and events Stream."""

    runner: AgentFrameworkRunner
    options: AgentSessionOptions
    events: Stream[AgentEvent]


def as_async(context: Context) -> AsyncContext:
    """Return the AsyncContext of an async Step handler."""
    if not isinstance(context, AsyncContext):
        raise TypeError("agent session Steps must run on an AsyncWorker")
    return context


def get_state(ctx: Context) -> AgentState:
    """Return the session state (a fresh one before ``StartAgentSession`` committed)."""
    return persistence.AgentState.get(ctx) or AgentState()


def step_id(ctx: Context) -> str:
    """Return the Step execution ID (never None inside a Step)."""
    return ctx.step_execution_id or ""


def event_writer(parts: SessionParts, ctx: Context, turn_id: str) -> AgentEventWriter:
    """Return a writer bound to this turn, Step execution and attempt."""
    return AgentEventWriter(
        lambda event: parts.events.write(ctx, event),
        turn_id=turn_id,
        step_execution_id=step_id(ctx),
        attempt=ctx.attempt,
    )


# Events that announce state their Step commits: they travel in the Step's result and are
# appended once it committed, so a reader who sees one finds that state in the snapshot.
_AFTER_COMMIT = frozenset(
    {
        AgentEventType.TURN_COMPLETED,
        AgentEventType.TURN_FAILED,
        AgentEventType.TURN_CONTINUED,
        AgentEventType.TOOL_CALL_DEFERRED,
        AgentEventType.TOOL_CALL_FINISHED,
        AgentEventType.TOOL_CALL_RECONCILED,
        AgentEventType.INTERRUPT_RAISED,
        AgentEventType.INTERRUPT_RESOLVED,
        AgentEventType.USAGE_RECORDED,
    }
)


def emit(
    parts: SessionParts, ctx: Context, turn_id: str, kind: AgentEventType, data: dict[str, Any]
) -> None:
    """Write one session event (best effort); state announcements wait for the commit.

    Call it on the Step's event loop (as the Steps do); a runner's events go through the
    thread-safe writer of :func:`runner_call` instead.
    """
    event = new_event(kind, data, turn_id, step_id(ctx), ctx.attempt)
    # an announcement is written here, in the handler, so it is in the result however the
    # handler runs; best effort: a lost event never fails the Step
    try:
        parts.events.write(ctx, event, after_commit=kind in _AFTER_COMMIT)
    except Exception:
        pass


def runner_call(parts: SessionParts, ctx: AsyncContext, turn_id: str) -> _RunnerCall:
    """Run a runner call with background heartbeats; its writer closes when it returns.

    Use as ``async with runner_call(parts, ctx, turn_id) as writer``.
    """
    return _RunnerCall(parts, ctx, turn_id)


class _RunnerCall:
    # a class, not an async generator: every model and tool call enters one, and a
    # generator-based context manager costs several times as much
    __slots__ = ("_ctx", "_parts", "_stop", "_turn_id", "_writer")

    def __init__(self, parts: SessionParts, ctx: AsyncContext, turn_id: str) -> None:
        self._parts = parts
        self._ctx = ctx
        self._turn_id = turn_id

    async def __aenter__(self) -> AgentEventWriter:
        self._writer = event_writer(self._parts, self._ctx, self._turn_id)
        self._stop = start_heartbeats(self._ctx.heartbeat)
        return self._writer

    async def __aexit__(self, *exc_info: object) -> None:
        self._stop()
        self._writer.close()


def all_tool_calls(ctx: Context) -> list[AgentToolCall]:
    """Every tool call record of the active turn, in deferral order (whole map loaded)."""
    amap = persistence.AgentToolCalls
    out = [amap.get(ctx, key) for key in amap.get_all_instance_keys(ctx)]
    return sorted((r for r in out if r is not None), key=lambda r: r.deferral_order)


def append_messages(
    ctx: Context, state: AgentState, turn_id: str, messages: Iterable[FrameworkMessage]
) -> AgentState:
    """Store messages after the last one; returns the state with the new count."""
    count = state.message_count
    now = time.time()
    for message in messages:
        count += 1
        stored = AgentMessage(
            sequence=count,
            turn_id=turn_id,
            role=message.role,
            framework_item=message.framework_item,
            text=message.text,
            created_at=now,
        )
        persistence.AgentMessages.set(ctx, message_sequence_key(count), stored)
    return replace(state, message_count=count)


def build_user_message(parts: SessionParts, text: str) -> FrameworkMessage:
    """Return the runner's user message for ``text``, checked to have role user."""
    return validate_user_message(parts.runner.build_user_message(text))


def clear_turn(ctx: Context, records: Iterable[AgentToolCall]) -> None:
    """Delete the turn's records, run state and interrupts (the turn has ended)."""
    ids = set()
    for record in records:
        persistence.AgentToolCalls.delete(ctx, record.tool_call_id)
        if record.interrupt_id:
            ids.add(record.interrupt_id)
    persistence.FrameworkRunState.delete(ctx)
    if ids:
        remove_interrupts(ctx, ids)


def pending_interrupts(ctx: Context) -> list[AgentInterrupt]:
    """Return the pending interrupts (empty when unset)."""
    return list(persistence.PendingInterrupts.get(ctx) or [])


def remove_interrupts(ctx: Context, interrupt_ids: Iterable[str]) -> bool:
    """Remove interrupts from ``PendingInterrupts``; whether any was pending."""
    ids = set(interrupt_ids)
    pending = pending_interrupts(ctx)
    kept = [i for i in pending if i.interrupt_id not in ids]
    if len(kept) == len(pending):
        return False
    persistence.PendingInterrupts.set(ctx, kept)
    return True


def finish_tool_call(
    parts: SessionParts | None,
    ctx: Context,
    record: AgentToolCall,
    status: ToolCallStatus,
    *,
    output: str | None = None,
    error: str | None = None,
    rejection_message: str | None = None,
    announced: bool = True,
) -> AgentToolCall:
    """Make a record final, publish its one ``ToolCallResults`` message, write the event.

    ``parts`` is None in RPCs (which cannot write Streams); the result then carries
    ``announced=False`` so ``ResumeTurn`` writes ``tool_call_finished`` instead.
    """
    final = replace(
        record, status=status, output=output, error=error, rejection_message=rejection_message
    )
    persistence.AgentToolCalls.set(ctx, record.tool_call_id, final)
    persistence.ToolCallResults.publish(
        ctx,
        ToolCallCompleted(
            tool_call_id=record.tool_call_id, status=status, announced=announced and bool(parts)
        ),
    )
    if parts is not None:
        emit(
            parts,
            ctx,
            record.turn_id,
            AgentEventType.TOOL_CALL_FINISHED,
            {"tool_call_id": record.tool_call_id, "tool_name": record.tool_name, "status": status},
        )
    return final


def control_pending(ctx: Context) -> bool:
    """Whether a steer or cancel request waits for the turn's next safe boundary."""
    return persistence.TurnControl.size(ctx) > 0
