"""The bodies of the session's RPCs (the ``@rpc`` methods of AgentSessionFlow call these)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from dex import Context

from dex_agents._enums import AgentStatus, ToolCallStatus, TurnControlKind
from dex_agents._history import read_messages
from dex_agents._persistence import persistence
from dex_agents._records import (
    AgentInterruptResolution,
    AgentMessagesPage,
    AgentSnapshot,
    AgentUsage,
    AgentUserMessage,
    ListAgentMessagesRequest,
    ResolveInterruptRequest,
    TurnControl,
)
from dex_agents._session import all_tool_calls, finish_tool_call, pending_interrupts
from dex_agents._text import SEQUENCE_KEY_DIGITS, is_blank, message_sequence_key

SNAPSHOT_MESSAGES = 200
MAX_PAGE = 200


def send_user_message(ctx: Context, message: AgentUserMessage) -> bool:
    """Queue a user message; False (and nothing queued) for blank text."""
    if is_blank(message.text):
        return False
    persistence.QueuedUserMessages.publish(ctx, AgentUserMessage(text=message.text))
    return True


def resolve_interrupt(ctx: Context, request: ResolveInterruptRequest) -> bool:
    """Remove a pending interrupt and publish its answer, in one commit.

    Returns False when the interrupt is not pending or its deadline (Worker clock) passed.
    """
    pending = pending_interrupts(ctx)
    match = next((i for i in pending if i.interrupt_id == request.interrupt_id), None)
    if match is None:
        return False
    if match.deadline is not None and time.time() > match.deadline:
        return False
    persistence.PendingInterrupts.set(ctx, [i for i in pending if i is not match])
    persistence.InterruptResolutions.publish(
        ctx,
        match.interrupt_id,
        AgentInterruptResolution(
            interrupt_id=match.interrupt_id,
            approved=request.approved,
            rejection_message=None if request.approved else request.rejection_message,
        ),
    )
    return True


async def get_agent_snapshot(ctx: Context) -> AgentSnapshot:
    """State, last 200 messages, pending interrupts, the turn's tool calls, usage, queue.

    Reads only the last 200 ``AgentMessages`` keys (by ``AgentState.message_count``).
    """
    state = persistence.AgentState.get(ctx)
    count = state.message_count if state is not None else 0
    return AgentSnapshot(
        session_id=ctx.flow_id,
        state=state,
        messages=await read_messages(ctx, count - SNAPSHOT_MESSAGES + 1, count),
        pending_interrupts=pending_interrupts(ctx),
        tool_calls=all_tool_calls(ctx),
        usage=persistence.AgentUsage.get(ctx) or AgentUsage(),
        queued_message_count=persistence.QueuedUserMessages.size(ctx),
    )


async def list_agent_messages(ctx: Context, request: ListAgentMessagesRequest) -> AgentMessagesPage:
    """Messages after ``after_sequence``, oldest first; ``limit`` clamped to 1..200.

    Reads only the page's keys (and one more, to know whether another page follows).
    """
    limit = min(max(request.limit, 1), MAX_PAGE)
    first = max(request.after_sequence, 0) + 1
    if first >= 10**SEQUENCE_KEY_DIGITS:
        return AgentMessagesPage(messages=[], next_after_sequence=None)
    rows = await persistence.AgentMessages.load_range(
        ctx, message_sequence_key(first), limit=limit + 1
    )
    page = [message for _, message in rows[:limit]]
    more = len(rows) > limit and bool(page)
    return AgentMessagesPage(messages=page, next_after_sequence=page[-1].sequence if more else None)


def _cancel_waiting_approvals(ctx: Context) -> None:
    """Finish every call still waiting for approval as cancelled (it never ran)."""
    waiting = [r for r in all_tool_calls(ctx) if r.status is ToolCallStatus.AWAITING_APPROVAL]
    if not waiting:
        return
    ids = {r.interrupt_id for r in waiting if r.interrupt_id}
    persistence.PendingInterrupts.set(
        ctx, [i for i in pending_interrupts(ctx) if i.interrupt_id not in ids]
    )
    for record in waiting:
        finish_tool_call(None, ctx, record, ToolCallStatus.CANCELLED)


@dataclass(frozen=True, kw_only=True)
class TurnStopPlan:
    """What a steer or cancel RPC must do besides publishing its request."""

    publish: bool
    cancel_approvals: bool
    interrupt_model: bool


def plan_turn_stop(ctx: Context, kind: TurnControlKind) -> TurnStopPlan:
    """Decide how a steer or cancel applies to the session as this snapshot shows it.

    Steer always publishes (with no turn running, the text simply starts the next one).
    Cancel is a no-op (False) when no turn runs and no steer waits. During tool calls,
    calls waiting for approval are cancelled at once. A cancel during a model call also
    stops that call (unless a cancel is already pending, which stopped it already).
    """
    state = persistence.AgentState.get(ctx)
    status = state.status if state is not None else None
    pending = persistence.TurnControl.pending_messages(ctx)
    if kind is TurnControlKind.CANCEL:
        running = state is not None and state.active_turn_id is not None
        if not running and not pending:
            return TurnStopPlan(publish=False, cancel_approvals=False, interrupt_model=False)
    already_cancelling = any(m.value.kind is TurnControlKind.CANCEL for m in pending)
    return TurnStopPlan(
        publish=True,
        cancel_approvals=status is AgentStatus.RUNNING_TOOLS,
        interrupt_model=(
            kind is TurnControlKind.CANCEL
            and status is AgentStatus.RUNNING_MODEL
            and not already_cancelling
        ),
    )


def apply_turn_stop(ctx: Context, kind: TurnControlKind, text: str, plan: TurnStopPlan) -> None:
    """Publish the request and cancel the approvals the plan names."""
    if not plan.publish:
        return
    persistence.TurnControl.publish(ctx, TurnControl(kind=kind, text=text))
    if plan.cancel_approvals:
        _cancel_waiting_approvals(ctx)
