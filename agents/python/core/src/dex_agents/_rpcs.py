"""The bodies of the session's RPCs (the ``@rpc`` methods of AgentSessionFlow call these)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from dex import AsyncClient, AttributeRangeSpec, Context, ReadAttributesRequest
from msgspec.structs import replace

from dex_agents._approvals import (
    apply_approval,
    check_identity,
    check_reconcile_request,
    check_resolve_request,
    server_now,
)
from dex_agents._enums import AgentStatus, ToolCallStatus, TurnControlKind
from dex_agents._history import read_messages, sequence_key_or_end
from dex_agents._persistence import (
    AGENT_MESSAGES,
    AGENT_STATE,
    AGENT_TOOL_CALLS,
    AGENT_USAGE,
    PENDING_INTERRUPTS,
    QUEUED_USER_MESSAGES,
    persistence,
)
from dex_agents._records import (
    AgentInterrupt,
    AgentInterruptResolution,
    AgentMessage,
    AgentMessagesPage,
    AgentSnapshot,
    AgentState,
    AgentToolCall,
    AgentUsage,
    AgentUserMessage,
    ListAgentMessagesRequest,
    ReconcileToolCallRequest,
    ResolveInterruptRequest,
    ToolCallReconciliation,
    TurnControl,
    UserInputCounts,
)
from dex_agents._session import all_tool_calls, finish_tool_call, pending_interrupts
from dex_agents._text import SEQUENCE_KEY_DIGITS, is_blank, message_sequence_key
from dex_agents._tool_input import InterruptKind

SNAPSHOT_MESSAGES = 200
MAX_PAGE = 200


def send_user_message(ctx: Context, message: AgentUserMessage) -> bool:
    """Queue a user message; False (and nothing queued) for blank text."""
    if is_blank(message.text):
        return False
    persistence.QueuedUserMessages.publish(ctx, AgentUserMessage(text=message.text))
    _handed_over(ctx, messages=1)
    return True


def _handed_over(ctx: Context, *, messages: int = 0, controls: int = 0) -> None:
    """Count a message queued or a control published for the waiting Steps to take."""
    counts = persistence.UserInputCounts.get(ctx) or UserInputCounts()
    persistence.UserInputCounts.set(
        ctx,
        replace(
            counts,
            queued_messages=counts.queued_messages + messages,
            published_controls=counts.published_controls + controls,
        ),
    )


def resolve_interrupt(ctx: Context, request: ResolveInterruptRequest) -> bool:
    """Apply one answer to a pending interrupt, in one commit.

    A rejection, or the approval that completes ``min_approvals``, removes the interrupt
    and publishes the answer (with the approved arguments and the receipts). An earlier
    approval of several is kept on the interrupt. Returns False (nothing changes) when
    the interrupt is not pending, its deadline passed (server clock), the approval's
    ``arguments_sha256`` no longer matches the arguments, or the approver already
    approved (or is missing) where several approvals are needed.

    Raises:
        InvalidApprovalError: the request is malformed (see ``check_resolve_request``).

    """
    check_resolve_request(request)
    pending = pending_interrupts(ctx)
    match = next((i for i in pending if i.interrupt_id == request.interrupt_id), None)
    if match is None:
        return False
    now = server_now(ctx)
    if match.deadline is not None and now > match.deadline:
        return False
    if match.kind is InterruptKind.QUESTION:
        # a tool's question: the answer (or a decline) goes to the call as it is
        persistence.PendingInterrupts.set(ctx, [i for i in pending if i is not match])
        persistence.InterruptResolutions.publish(
            ctx,
            match.interrupt_id,
            AgentInterruptResolution(
                interrupt_id=match.interrupt_id,
                approved=request.approved,
                rejection_message=None if request.approved else request.rejection_message,
                answer=request.answer if request.approved else None,
            ),
        )
        return True
    if not request.approved:
        persistence.PendingInterrupts.set(ctx, [i for i in pending if i is not match])
        persistence.InterruptResolutions.publish(
            ctx,
            match.interrupt_id,
            AgentInterruptResolution(
                interrupt_id=match.interrupt_id,
                approved=False,
                rejection_message=request.rejection_message,
                rejected_by=check_identity(request.approver, "approver") or None,
            ),
        )
        return True
    outcome = apply_approval(match, request, now)
    if not outcome.applies:
        return False
    if not outcome.complete:
        persistence.PendingInterrupts.set(
            ctx, [outcome.interrupt if i is match else i for i in pending]
        )
        return True
    persistence.PendingInterrupts.set(ctx, [i for i in pending if i is not match])
    persistence.InterruptResolutions.publish(
        ctx,
        match.interrupt_id,
        AgentInterruptResolution(
            interrupt_id=match.interrupt_id,
            approved=True,
            arguments=outcome.interrupt.arguments,
            approvals=outcome.interrupt.approvals,
        ),
    )
    return True


def reconcile_tool_call(ctx: Context, request: ReconcileToolCallRequest) -> bool:
    """Settle a call waiting for reconciliation as succeeded or failed, with a note.

    Only a call of the active turn in ``awaiting_reconciliation`` can be settled; False
    (nothing changes) otherwise. The record becomes final at once; ``ResumeTurn`` writes
    its ``tool_call_reconciled`` and ``tool_call_finished`` events.

    Raises:
        InvalidApprovalError: blank or too long note, or a malformed ``reconciled_by``.

    """
    check_reconcile_request(request)
    record = persistence.AgentToolCalls.get(ctx, request.tool_call_id)
    if record is None or record.status is not ToolCallStatus.AWAITING_RECONCILIATION:
        return False
    status = ToolCallStatus.SUCCEEDED if request.succeeded else ToolCallStatus.FAILED
    settled = replace(
        record,
        reconciliation=ToolCallReconciliation(
            status=status,
            evidence=request.note.strip(),
            reconciled_by=check_identity(request.reconciled_by, "reconciled_by") or "manual",
            reconciled_at=server_now(ctx),
            unknown_detail=record.error,
        ),
    )
    finish_tool_call(None, ctx, settled, status, error=record.error)
    return True


async def get_agent_snapshot(ctx: Context) -> AgentSnapshot:
    """State, last 200 messages, pending interrupts, the turn's tool calls, usage, queue.

    Reads only the last 200 ``AgentMessages`` keys (by ``AgentState.message_count``).
    """
    state = persistence.AgentState.get(ctx)
    first, last = _snapshot_window(state)
    return AgentSnapshot(
        session_id=ctx.flow_id,
        state=state,
        messages=await read_messages(ctx, first, last),
        pending_interrupts=pending_interrupts(ctx),
        tool_calls=all_tool_calls(ctx),
        usage=persistence.AgentUsage.get(ctx) or AgentUsage(),
        queued_message_count=persistence.QueuedUserMessages.size(ctx),
    )


def _snapshot_window(state: AgentState | None) -> tuple[int, int]:
    count = state.message_count if state is not None else 0
    return count - SNAPSHOT_MESSAGES + 1, count


def _physical(map_name: str, key: str) -> str:
    # the engine's physical name of a map instance: "<map>/<URL-quoted key>"
    return f"{map_name}/{quote(key, safe='')}"


async def read_committed_snapshot(client: AsyncClient, session_id: str) -> AgentSnapshot:
    """Build the snapshot the RPC returns from the store's committed values (no Worker).

    Two reads, both of one run: the singletons and the tool calls, then the messages the
    state counts (stored messages never change, so the second read agrees with the first).
    """
    codec = client.registry.codec_for
    first_read = await client.read_attributes(
        session_id,
        ReadAttributesRequest(
            names=[AGENT_STATE, PENDING_INTERRUPTS, AGENT_USAGE], maps=[AGENT_TOOL_CALLS]
        ),
    )
    values = first_read.values

    def value(name: str, tp: object) -> Any:
        raw = values.get(name)
        return None if raw is None else codec(tp).decode(bytes(raw))

    state: AgentState | None = value(AGENT_STATE, AgentState)
    messages: list[AgentMessage] = []
    first, last = _snapshot_window(state)
    first = max(first, 1)
    if last >= first and first < 10**SEQUENCE_KEY_DIGITS:
        end = sequence_key_or_end(last + 1)
        window = await client.read_attributes(
            session_id,
            ReadAttributesRequest(
                ranges=[
                    AttributeRangeSpec(
                        map=AGENT_MESSAGES,
                        start=_physical(AGENT_MESSAGES, message_sequence_key(first)),
                        end=None if end is None else _physical(AGENT_MESSAGES, end),
                    )
                ],
                run_id=first_read.info.run_id,
            ),
        )
        message_codec = codec(AgentMessage)
        messages = [message_codec.decode(bytes(v)) for _, v in sorted(window.values.items())]
    tool_codec = codec(AgentToolCall)
    prefix = AGENT_TOOL_CALLS + "/"
    calls = [tool_codec.decode(bytes(v)) for n, v in values.items() if n.startswith(prefix)]
    return AgentSnapshot(
        session_id=session_id,
        state=state,
        messages=messages,
        pending_interrupts=list(value(PENDING_INTERRUPTS, list[AgentInterrupt]) or []),
        tool_calls=sorted(calls, key=lambda r: r.deferral_order),
        usage=value(AGENT_USAGE, AgentUsage) or AgentUsage(),
        queued_message_count=first_read.channel_sizes.get(QUEUED_USER_MESSAGES, 0),
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
    """Finish every call still waiting for approval as cancelled (it never ran).

    A call waiting for a person to reconcile it ends ``outcome_unknown`` instead.
    """
    records = all_tool_calls(ctx)
    for record in records:
        if record.status is ToolCallStatus.AWAITING_RECONCILIATION:
            finish_tool_call(None, ctx, record, ToolCallStatus.OUTCOME_UNKNOWN, error=record.error)
    waiting = [r for r in records if r.status is ToolCallStatus.AWAITING_APPROVAL]
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
    _handed_over(ctx, controls=1)
    if plan.cancel_approvals:
        _cancel_waiting_approvals(ctx)
