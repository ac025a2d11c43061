"""The turn Steps: start, wait for a message, model calls, resume, failure, stop.

Exactly one of these is live at a time in a session (the turn chain), so they are the only
writers of ``AgentState``, ``AgentUsage`` and ``AgentMessages``. Tool Steps only write
their own ``AgentToolCalls`` instance and publish ``ToolCallResults``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dex import (
    Context,
    RetryPolicy,
    Step,
    StepDecision,
    StepDurability,
    StepMovement,
    StepOptions,
    Wait,
)
from msgspec.structs import replace

from dex_agents._approvals import canonical_arguments_sha256, server_now
from dex_agents._enums import AgentEventType, AgentStatus, ToolCallStatus, TurnControlKind
from dex_agents._history import session_messages
from dex_agents._persistence import persistence
from dex_agents._policy import is_approval_required
from dex_agents._records import (
    AgentInterrupt,
    AgentSessionStartInput,
    AgentState,
    AgentToolCall,
    AgentUsage,
    TurnControl,
)
from dex_agents._runner import AgentTurnContext, ContinueTurn, ToolCallsRequested, TurnCompleted
from dex_agents._session import (
    SessionParts,
    all_tool_calls,
    append_messages,
    as_async,
    build_user_message,
    clear_turn,
    control_pending,
    emit,
    get_state,
    pending_interrupts,
    runner_call,
)
from dex_agents._text import (
    InvalidRunnerOutputError,
    build_turn_failure_note,
    build_turn_stopped_note,
    idempotency_key_of,
    interrupt_id_of,
    is_blank,
    message_sequence_key,
    turn_id_of,
    validate_outcome,
    validate_tool_call_ids_unused,
)
from dex_agents._tool_steps import (
    AwaitToolApproval,
    CallSingleAttemptTool,
    CallTool,
    emit_reconciled,
    movement_to,
)

SYNC = StepDurability.SYNC
RUN_MODEL_TIMEOUT = timedelta(minutes=15)
RUN_MODEL_HEARTBEAT_TIMEOUT = timedelta(minutes=2)
RUN_MODEL_ATTEMPTS = 3
RUN_MODEL_RETRY_WINDOW = timedelta(minutes=30)
MAX_CONTROL_BATCH = 1000
MAX_PRELOADED_MESSAGES = 32

# Under the Worker's loggers, so a worker script shows it beside the failed attempts.
log = logging.getLogger("dex.worker.agent")


@dataclass(frozen=True, kw_only=True)
class ToolSteps:
    """The tool Step instances RunModel schedules."""

    approval: AwaitToolApproval
    call: CallTool
    single: CallSingleAttemptTool


_BASE_OPTIONS = StepOptions(wait_for_durability=SYNC, execute_durability=SYNC)
_INLINE_WAIT = dataclasses.replace(_BASE_OPTIONS, wait_for_inline=True)


def _sync(**fields: Any) -> StepOptions:
    return dataclasses.replace(_BASE_OPTIONS, **fields)


def open_turn(parts: SessionParts, ctx: Context, state: AgentState, text: str) -> AgentState:
    """Store the user message and open a new turn; return the state (not yet written)."""
    number = state.turn_count + 1
    turn_id = turn_id_of(number)
    opened = replace(
        state,
        turn_count=number,
        active_turn_id=turn_id,
        status=AgentStatus.RUNNING_MODEL,
        turn_model_calls=0,
        turn_start_unannounced=False,
    )
    return append_messages(ctx, opened, turn_id, [build_user_message(parts, text)])


def start_turn(parts: SessionParts, ctx: Context, state: AgentState, text: str) -> StepDecision:
    """Store the user message, open a new turn and go to ``RunModel``."""
    stored = open_turn(parts, ctx, state, text)
    persistence.AgentState.set(ctx, stored)
    emit(
        parts,
        ctx,
        stored.active_turn_id or "",
        AgentEventType.TURN_STARTED,
        {"sequence": stored.message_count},
    )
    return StepDecision.go_to_many(first_model_call(stored))


def first_model_call(state: AgentState) -> StepMovement[None]:
    """The movement to a turn's first ``RunModel``, loading the messages its model lacks.

    Those are the messages stored since the last model call read them (at most
    ``MAX_PRELOADED_MESSAGES``, the newest): a Worker that served that call has the
    older ones cached, so the call needs no read of its own from the server.
    """
    first = max(state.model_message_count + 1, state.message_count - MAX_PRELOADED_MESSAGES + 1)
    loads = tuple(
        persistence.AgentMessages.load(message_sequence_key(n))
        for n in range(max(first, 1), state.message_count + 1)
    )
    if not loads:
        return StepMovement.of(RunModel)
    options = dataclasses.replace(RunModel.options(), execute_load_attribute_map_instances=loads)
    return StepMovement.of(RunModel, options=options)


def _end_turn(
    parts: SessionParts,
    ctx: Context,
    state: AgentState,
    records: list[AgentToolCall],
    note: str,
) -> AgentState:
    turn_id = state.active_turn_id or turn_id_of(state.turn_count)
    if note:
        state = append_messages(ctx, state, turn_id, [build_user_message(parts, note)])
    clear_turn(ctx, records)
    return replace(
        state,
        status=AgentStatus.WAITING_FOR_USER_MESSAGE,
        active_turn_id=None,
        turn_model_calls=0,
        turn_start_unannounced=False,
    )


def fail_turn(
    parts: SessionParts, ctx: Context, state: AgentState, records: list[AgentToolCall], error: str
) -> StepDecision:
    """Record ``last_turn_error``, leave the failure note, clear the turn, wait again."""
    turn_id = state.active_turn_id or turn_id_of(state.turn_count)
    log.error("agent session %s: turn %s failed: %s", ctx.flow_id, turn_id, error)
    ended = _end_turn(parts, ctx, state, records, build_turn_failure_note(records))
    persistence.AgentState.set(ctx, replace(ended, last_turn_error=error))
    emit(parts, ctx, turn_id, AgentEventType.TURN_FAILED, {"error": error})
    return StepDecision.go_to(AwaitUserMessage)


def took(state: AgentState, *, messages: int = 0, controls: int = 0) -> AgentState:
    """``state`` counting the queued messages and controls a waiting Step just took."""
    if not messages and not controls:
        return state
    return replace(
        state,
        taken_messages=state.taken_messages + messages,
        taken_controls=state.taken_controls + controls,
    )


def steer_text(controls: list[TurnControl]) -> str | None:
    """Return the text that starts the next turn: steers after the last cancel, joined."""
    texts: list[str] = []
    for control in controls:
        if control.kind is TurnControlKind.CANCEL:
            texts = []
        elif not is_blank(control.text):
            texts.append(control.text)
    return "\n\n".join(texts) or None


class _TurnStep(Step[None]):
    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    def get_step_options(self) -> StepOptions:
        return _sync()


class StartAgentSession(Step[AgentSessionStartInput]):
    """Start Step: initializes state, usage and interrupts; a non-blank message starts a turn."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    def get_step_options(self) -> StepOptions:
        return _sync()

    async def execute(self, context: Context, input: AgentSessionStartInput) -> StepDecision:
        persistence.AgentUsage.set(context, AgentUsage())
        persistence.PendingInterrupts.set(context, [])
        state = AgentState()
        if input is not None and not is_blank(input.initial_message):
            return start_turn(self._parts, context, state, input.initial_message or "")
        persistence.AgentState.set(context, state)
        return StepDecision.go_to(AwaitUserMessage)


class AwaitUserMessage(_TurnStep):
    """Waits for the next queued user message (or a steer) and starts a turn with it."""

    def get_step_options(self) -> StepOptions:
        # Its Wait depends on nothing but the Channels: the Worker of the Step that ends a
        # turn computes it inline, saving a task and a commit per turn.
        return _INLINE_WAIT

    async def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.any_of(
            persistence.TurnControl.at_least(1), persistence.QueuedUserMessages.for_one()
        )

    async def execute(self, context: Context, input: None) -> StepDecision:
        controls = persistence.TurnControl.results(context)
        queued = persistence.QueuedUserMessages.results(context)
        state = took(get_state(context), messages=len(queued), controls=len(controls))
        text = steer_text(controls)
        if text is None:
            text = queued[0].text if queued else None
        if text is None or is_blank(text):
            # A cancel with no turn to cancel, or nothing usable: keep waiting.
            persistence.AgentState.set(context, state)
            return StepDecision.go_to(AwaitUserMessage)
        return start_turn(self._parts, context, state, text)


class RunModel(_TurnStep):
    """One model call of the active turn; stores its outcome and schedules what follows."""

    def __init__(self, parts: SessionParts, tools: ToolSteps) -> None:
        super().__init__(parts)
        self._tools = tools

    def get_step_options(self) -> StepOptions:
        return self.options()

    @staticmethod
    @functools.cache
    def options() -> StepOptions:
        """Options of this Step (the seeds' timeouts, retries and failure route)."""
        return _sync(
            execute_method_timeout=RUN_MODEL_TIMEOUT,
            heartbeat_timeout=RUN_MODEL_HEARTBEAT_TIMEOUT,
            execute_retry=RetryPolicy(
                maximum_attempts=RUN_MODEL_ATTEMPTS, total_duration=RUN_MODEL_RETRY_WINDOW
            ),
            execute_load_attribute_maps=(persistence.AgentToolCalls,),
        ).on_execute_failure_proceed_to(RecordTurnFailure, RecordTurnFailure.options())

    async def execute(self, context: Context, input: None) -> StepDecision:
        ctx = as_async(context)
        state = get_state(ctx)
        turn_id = state.active_turn_id
        if turn_id is None:
            return StepDecision.go_to(AwaitUserMessage)
        if state.turn_start_unannounced:
            # send_user_message opened this turn in its own commit, and RPCs cannot write
            # Streams: the turn's first model call announces it (each attempt, like any event).
            emit(
                self._parts,
                ctx,
                turn_id,
                AgentEventType.TURN_STARTED,
                {"sequence": state.message_count},
            )
            state = replace(state, turn_start_unannounced=False)
        if control_pending(ctx):
            return StepDecision.go_to(StopTurn)
        records = all_tool_calls(ctx)
        by_id = {r.tool_call_id: r for r in records}
        limit = self._parts.options.max_model_calls_per_turn
        if state.turn_model_calls >= limit:
            return fail_turn(
                self._parts,
                ctx,
                state,
                records,
                f"the turn reached AgentSessionOptions.max_model_calls_per_turn ({limit}): "
                f"{state.turn_model_calls} model calls without a final answer",
            )
        # One frame written before the model call tells the server this attempt started: a
        # Worker lost from here on costs the attempt (the retry policy bounds the repeats)
        # rather than being redelivered as if it never ran.
        await ctx.heartbeat()
        messages = await session_messages(ctx, state.message_count)
        state = replace(state, model_message_count=state.message_count)
        async with runner_call(self._parts, ctx, turn_id) as writer:
            outcome = await self._parts.runner.run_model_step(
                AgentTurnContext(
                    flow_id=ctx.flow_id,
                    turn_id=turn_id,
                    attempt=ctx.attempt,
                    messages=messages,
                    framework_run_state=persistence.FrameworkRunState.get(ctx),
                    tool_calls=by_id,
                    events=writer,
                    heartbeat=ctx.heartbeat,
                    options=self._parts.options,
                )
            )
        try:
            validate_outcome(outcome)
            if isinstance(outcome, ToolCallsRequested):
                validate_tool_call_ids_unused(outcome, by_id)
        except InvalidRunnerOutputError as exc:
            return fail_turn(self._parts, ctx, state, records, f"invalid runner output: {exc}")
        self._record_usage(ctx, turn_id, outcome.usage)
        state = replace(state, turn_model_calls=state.turn_model_calls + 1)
        if isinstance(outcome, ContinueTurn):
            # Another model call of the same turn, in its own RunModel Step.
            persistence.FrameworkRunState.set(ctx, outcome.framework_run_state)
            persistence.AgentState.set(ctx, state)
            emit(
                self._parts,
                ctx,
                turn_id,
                AgentEventType.TURN_CONTINUED,
                {"reason": outcome.reason, "model_calls": state.turn_model_calls},
            )
            return StepDecision.go_to(RunModel)
        if isinstance(outcome, TurnCompleted):
            stored = append_messages(ctx, state, turn_id, outcome.new_messages)
            clear_turn(ctx, records)
            done = replace(
                stored,
                status=AgentStatus.WAITING_FOR_USER_MESSAGE,
                active_turn_id=None,
                last_turn_error=None,
                turn_model_calls=0,
            )
            persistence.AgentState.set(ctx, done)
            emit(
                self._parts,
                ctx,
                turn_id,
                AgentEventType.TURN_COMPLETED,
                {"message_count": done.message_count},
            )
            return StepDecision.go_to(AwaitUserMessage)
        return self._defer_tools(ctx, state, turn_id, outcome, len(records))

    def _record_usage(self, ctx: Context, turn_id: str, usage: AgentUsage | None) -> None:
        if usage is None:
            # Not reported: the total stays as it is and no usage_recorded is written.
            return
        session = (persistence.AgentUsage.get(ctx) or AgentUsage()).plus(usage)
        persistence.AgentUsage.set(ctx, session)
        emit(
            self._parts,
            ctx,
            turn_id,
            AgentEventType.USAGE_RECORDED,
            {"recorded": _usage_dict(usage), "session": _usage_dict(session)},
        )

    def _defer_tools(
        self,
        ctx: Context,
        state: AgentState,
        turn_id: str,
        outcome: ToolCallsRequested,
        offset: int,
    ) -> StepDecision:
        now = server_now(ctx)
        limit = self._parts.options.interrupt_deadline
        deadline = None if limit is None else now + limit.total_seconds()
        interrupts = pending_interrupts(ctx)
        movements: list[StepMovement[Any]] = []
        for index, call in enumerate(outcome.tool_calls):
            approval = is_approval_required(call.policy)
            interrupt_id = interrupt_id_of(turn_id, call.tool_call_id) if approval else None
            record = AgentToolCall(
                tool_call_id=call.tool_call_id,
                turn_id=turn_id,
                tool_name=call.tool_name,
                arguments=call.arguments,
                proposed_arguments=call.arguments,
                effect=call.policy.effect,
                requires_approval=approval,
                deferral_order=offset + index,
                status=ToolCallStatus.AWAITING_APPROVAL if approval else ToolCallStatus.PENDING,
                idempotency_key=idempotency_key_of(ctx.flow_id, turn_id, call.tool_call_id),
                interrupt_id=interrupt_id,
            )
            persistence.AgentToolCalls.set(ctx, call.tool_call_id, record)
            emit(
                self._parts,
                ctx,
                turn_id,
                AgentEventType.TOOL_CALL_DEFERRED,
                {
                    "tool_call_id": call.tool_call_id,
                    "tool_name": call.tool_name,
                    "effect": call.policy.effect,
                    "requires_approval": approval,
                },
            )
            if interrupt_id is not None:
                interrupts.append(
                    AgentInterrupt(
                        interrupt_id=interrupt_id,
                        tool_call_id=call.tool_call_id,
                        turn_id=turn_id,
                        tool_name=call.tool_name,
                        arguments=call.arguments,
                        created_at=now,
                        deadline=deadline,
                        arguments_sha256=canonical_arguments_sha256(call.arguments),
                        min_approvals=call.policy.min_approvals,
                    )
                )
                emit(
                    self._parts,
                    ctx,
                    turn_id,
                    AgentEventType.INTERRUPT_RAISED,
                    {
                        "interrupt_id": interrupt_id,
                        "tool_call_id": call.tool_call_id,
                        "tool_name": call.tool_name,
                        "deadline": deadline,
                    },
                )
                movements.append(movement_to(self._tools.approval, call.tool_call_id))
            elif call.policy.effect.is_retryable:
                movements.append(movement_to(self._tools.call, call.tool_call_id))
            else:
                movements.append(movement_to(self._tools.single, call.tool_call_id))
        if any(m.step is self._tools.approval for m in movements):
            persistence.PendingInterrupts.set(ctx, interrupts)
        persistence.FrameworkRunState.set(ctx, outcome.framework_run_state)
        persistence.AgentState.set(ctx, replace(state, status=AgentStatus.RUNNING_TOOLS))
        movements.append(StepMovement.of(ResumeTurn, len(outcome.tool_calls)))
        return StepDecision.go_to_many(*movements)


def _usage_dict(usage: AgentUsage) -> dict[str, int]:
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


class ResumeTurn(Step[int]):
    """Waits for the turn's tool results, then calls the model again (or stops the turn)."""

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    def get_step_options(self) -> StepOptions:
        # The Worker that delivers the last tool result may run execute with it (its
        # wait_for brings the map the execute reads): see StepOptions.execute_inline.
        return _sync(
            wait_for_load_attribute_maps=(persistence.AgentToolCalls,),
            execute_load_attribute_maps=(persistence.AgentToolCalls,),
            execute_inline=True,
        )

    async def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(persistence.ToolCallResults.for_n(max(1, input)))

    async def execute(self, context: Context, input: int) -> StepDecision:
        records = all_tool_calls(context)
        by_id = {r.tool_call_id: r for r in records}
        for result in persistence.ToolCallResults.results(context):
            record = by_id.get(result.tool_call_id)
            if not result.announced and record is not None:
                # Settled by reconcile_tool_call (an RPC, which cannot write Streams).
                emit_reconciled(self._parts, context, record)
                emit(
                    self._parts,
                    context,
                    record.turn_id,
                    AgentEventType.TOOL_CALL_FINISHED,
                    {
                        "tool_call_id": record.tool_call_id,
                        "tool_name": record.tool_name,
                        "status": result.status,
                    },
                )
        unfinished = sum(1 for r in records if not r.status.is_final)
        if unfinished:
            return StepDecision.go_to(ResumeTurn, unfinished)
        if control_pending(context):
            return StepDecision.go_to(StopTurn)
        state = get_state(context)
        persistence.AgentState.set(context, replace(state, status=AgentStatus.RUNNING_MODEL))
        return StepDecision.go_to(RunModel)


class RecordTurnFailure(_TurnStep):
    """RunModel's failure route: ``last_turn_error``, the failure note, a cleared turn."""

    @staticmethod
    @functools.cache
    def options() -> StepOptions:
        """Options of this Step (whole ``AgentToolCalls`` map loaded)."""
        return _sync(execute_load_attribute_maps=(persistence.AgentToolCalls,))

    def get_step_options(self) -> StepOptions:
        return self.options()

    async def execute(self, context: Context, input: None) -> StepDecision:
        recovery = context.recovery_error
        error = f"{recovery.error_type}: {recovery.detail}" if recovery else "the turn failed"
        return fail_turn(self._parts, context, get_state(context), all_tool_calls(context), error)


class StopTurn(_TurnStep):
    """Ends a steered or cancelled turn at a safe boundary; a steer starts the next turn."""

    def get_step_options(self) -> StepOptions:
        return _sync(
            execute_load_attribute_maps=(persistence.AgentToolCalls,),
            execute_lock_attributes=(persistence.PendingInterrupts.lock(),),
        )

    async def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(persistence.TurnControl.at_most(MAX_CONTROL_BATCH))

    async def execute(self, context: Context, input: None) -> StepDecision:
        controls = persistence.TurnControl.results(context)
        text = steer_text(controls)
        state = took(get_state(context), controls=len(controls))
        turn_id = state.active_turn_id
        if turn_id is not None:
            records = all_tool_calls(context)
            how = "steered" if text else "cancelled"
            note = build_turn_stopped_note(records, how=how)
            state = _end_turn(self._parts, context, state, records, note)
            kind = AgentEventType.TURN_STEERED if text else AgentEventType.TURN_CANCELLED
            emit(self._parts, context, turn_id, kind, {"message_count": state.message_count})
        if text is not None:
            return start_turn(self._parts, context, state, text)
        persistence.AgentState.set(context, state)
        return StepDecision.go_to(AwaitUserMessage)
