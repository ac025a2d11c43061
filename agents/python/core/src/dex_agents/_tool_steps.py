"""The per-tool-call Steps: approval, the tool run, and their failure routes.

Each receives the tool call ID as input and loads only its own ``AgentToolCalls``
instance through per-movement ``StepOptions`` (``movement_to``), so parallel tool Steps
never share state. A Step whose record is already final ends without running or
publishing.
"""

from __future__ import annotations

import dataclasses
import inspect
import operator
from datetime import UTC, datetime
from typing import Any, ClassVar

from dex import (
    Context,
    InstanceLoad,
    RetryPolicy,
    Step,
    StepDecision,
    StepDurability,
    StepMovement,
    StepOptions,
    Timer,
    TimerCondition,
    Wait,
)
from msgspec.structs import replace

from dex_agents._approvals import canonical_arguments_sha256, server_now
from dex_agents._enums import AgentEventType, ToolCallStatus, ToolEffect
from dex_agents._persistence import persistence
from dex_agents._policy import ReconcileResult
from dex_agents._records import (
    AgentInterrupt,
    AgentInterruptResolution,
    AgentToolCall,
    ToolCallReconciliation,
)
from dex_agents._runner import DeferredToolExecution, ToolExecutionError, bind_tool_execution
from dex_agents._session import (
    SessionParts,
    as_async,
    control_pending,
    emit,
    finish_tool_call,
    pending_interrupts,
    remove_interrupts,
    runner_call,
)
from dex_agents._tool_input import (
    SINGLE_ATTEMPT_QUESTION_ERROR,
    InterruptKind,
    ToolInputAnswer,
    ToolInputRequired,
)

EXPIRED_REJECTION = "The approval deadline passed before anyone answered."
EXPIRED_QUESTION = "The deadline passed before anyone answered the tool's question."
STALE_APPROVAL_REJECTION = "The approvals given do not cover the arguments the call would run with."
RECONCILE_ATTEMPTS = 3
SYNC = StepDurability.SYNC


def _record(ctx: Context, tool_call_id: str) -> AgentToolCall | None:
    return persistence.AgentToolCalls.get(ctx, tool_call_id)


class _ToolCallStep(Step[str]):
    """Base: holds the session parts and builds the per-call options."""

    _base: StepOptions | None = None

    def __init__(self, parts: SessionParts) -> None:
        self._parts = parts

    def base_options(self) -> StepOptions:
        return StepOptions(wait_for_durability=SYNC, execute_durability=SYNC)

    def cached_base_options(self) -> StepOptions:
        """``base_options()``, built once (options are immutable; every call needs them)."""
        if self._base is None:
            self._base = self.base_options()
        return self._base

    def get_step_options(self) -> StepOptions:
        return self.cached_base_options()

    def options_for(self, tool_call_id: str) -> StepOptions:
        load = (persistence.AgentToolCalls.load(tool_call_id),)
        opts = _loading(self.cached_base_options(), load)
        failure = opts.execute_failure_options
        if failure is not None:
            _set(opts, "execute_failure_options", _loading(failure, load))
        return opts


def _loading(options: StepOptions, load: tuple[InstanceLoad, ...]) -> StepOptions:
    """A copy of validated ``options`` whose methods both load ``load``.

    Every tool call's movement needs two (its own and its failure route's).
    ``dataclasses.replace`` costs about three times as much, ``copy.copy`` more: they run
    the constructor's checks again for two fields that cannot make valid options invalid.
    """
    out = object.__new__(StepOptions)
    for name, value in zip(_OPTION_FIELDS, _option_values(options), strict=True):
        _set(out, name, value)
    _set(out, "wait_for_load_attribute_map_instances", load)
    _set(out, "execute_load_attribute_map_instances", load)
    return out


_OPTION_FIELDS = tuple(f.name for f in dataclasses.fields(StepOptions))
_option_values = operator.attrgetter(*_OPTION_FIELDS)
_set = object.__setattr__


def movement_to(step: _ToolCallStep, tool_call_id: str) -> StepMovement[str]:
    """Return a movement to a tool Step for one call, loading only that call's record."""
    return StepMovement.of(step, tool_call_id, options=step.options_for(tool_call_id))


def _deadline_timer(deadline: float) -> TimerCondition:
    # The deadline is a server-clock time and the server fires the Timer, so the
    # Worker's clock plays no part in when an approval expires.
    return Timer.at(datetime.fromtimestamp(deadline, UTC))


def _interrupt_step_options() -> StepOptions:
    # both Steps change PendingInterrupts under its lock, committed synchronously
    return StepOptions(
        wait_for_durability=SYNC,
        execute_durability=SYNC,
        execute_lock_attributes=(persistence.PendingInterrupts.lock(),),
    )


class AwaitToolApproval(_ToolCallStep):
    """Waits for the answer to one call's interrupt, or for its deadline."""

    def __init__(self, parts: SessionParts, run_steps: dict[bool, _ToolCallStep]) -> None:
        super().__init__(parts)
        self._run_steps = run_steps

    def base_options(self) -> StepOptions:
        return _interrupt_step_options()

    async def wait_for(self, context: Context, input: str) -> Wait:
        record = _record(context, input)
        if (
            record is None
            or record.status is not ToolCallStatus.AWAITING_APPROVAL
            or record.interrupt_id is None
            or control_pending(context)
        ):
            return Wait.skip_immediately()
        answer = persistence.InterruptResolutions.for_one(record.interrupt_id)
        deadline = _interrupt_deadline(context, record.interrupt_id)
        if deadline is None:
            return Wait.until(answer)
        return Wait.any_of(_deadline_timer(deadline), answer)

    async def execute(self, context: Context, input: str) -> StepDecision:
        record = _record(context, input)
        if record is None or record.status is not ToolCallStatus.AWAITING_APPROVAL:
            return StepDecision.dead_end()
        interrupt_id = record.interrupt_id or ""
        answers = persistence.InterruptResolutions.results(context, interrupt_id)
        if answers:
            answer = answers[0]
            remove_interrupts(context, [interrupt_id])
            if record.question is not None:
                # a question's answer (or decline) resumes the same call: no receipts apply
                rejection = None if answer.approved else answer.rejection_message
                self._emit_resolved(context, record, answer, rejection)
                resumed = _record_answer(context, record, answer.approved, answer.answer)
                return StepDecision.go_to_many(movement_to(self._run_step(resumed), input))
            approved = _approve(context, record, answer) if answer.approved else None
            if answer.approved and approved is None:
                answer = AgentInterruptResolution(
                    interrupt_id, False, rejection_message=STALE_APPROVAL_REJECTION
                )
            rejection = None if answer.approved else answer.rejection_message
            self._emit_resolved(context, approved or record, answer, rejection)
            if approved is not None:
                return StepDecision.go_to_many(movement_to(self._run_step(approved), input))
            finish_tool_call(
                self._parts, context, record, ToolCallStatus.REJECTED, rejection_message=rejection
            )
            return StepDecision.dead_end()
        if control_pending(context):
            remove_interrupts(context, [interrupt_id])
            finish_tool_call(self._parts, context, record, ToolCallStatus.CANCELLED)
            return StepDecision.dead_end()
        deadline = _interrupt_deadline(context, interrupt_id)
        if deadline is None or not context.has_timer_fired():
            return StepDecision.go_to_many(movement_to(self, input))
        if not remove_interrupts(context, [interrupt_id]):
            # Answered as the Timer fired: the answer won; wait again to apply it.
            return StepDecision.go_to_many(movement_to(self, input))
        message = EXPIRED_REJECTION if record.question is None else EXPIRED_QUESTION
        expired = AgentInterruptResolution(interrupt_id, False, message)
        self._emit_resolved(context, record, expired, message)
        finish_tool_call(
            self._parts, context, record, ToolCallStatus.REJECTED, rejection_message=message
        )
        return StepDecision.dead_end()

    def _emit_resolved(
        self,
        ctx: Context,
        record: AgentToolCall,
        answer: AgentInterruptResolution,
        rejection: str | None,
    ) -> None:
        emit(
            self._parts,
            ctx,
            record.turn_id,
            AgentEventType.INTERRUPT_RESOLVED,
            {
                "interrupt_id": record.interrupt_id or "",
                "approved": answer.approved,
                "rejection_message": rejection,
                "approvers": [a.approver for a in answer.approvals],
                "arguments_sha256": canonical_arguments_sha256(record.arguments),
                "arguments_edited": record.arguments_edited,
                "rejected_by": answer.rejected_by,
            },
        )

    def _run_step(self, record: AgentToolCall) -> _ToolCallStep:
        return self._run_steps[record.effect.is_retryable]


def _interrupt_deadline(ctx: Context, interrupt_id: str) -> float | None:
    for interrupt in persistence.PendingInterrupts.get(ctx) or []:
        if interrupt.interrupt_id == interrupt_id:
            return interrupt.deadline
    return None


def _record_answer(
    ctx: Context, record: AgentToolCall, accepted: bool, content: dict[str, Any] | None
) -> AgentToolCall:
    question = record.question
    assert question is not None
    answer = ToolInputAnswer(
        key=question.key,
        action="accept" if accepted else "decline",
        content=content if accepted else None,
    )
    resumed = replace(
        record,
        status=ToolCallStatus.APPROVED if record.requires_approval else ToolCallStatus.PENDING,
        question=None,
        answers=[*record.answers, answer],
    )
    persistence.AgentToolCalls.set(ctx, record.tool_call_id, resumed)
    return resumed


def _approve(
    ctx: Context, record: AgentToolCall, answer: AgentInterruptResolution
) -> AgentToolCall | None:
    """Record the approval and the arguments it covers; None if the receipts do not match."""
    arguments = answer.arguments if answer.arguments is not None else record.arguments
    digest = canonical_arguments_sha256(arguments)
    if any(receipt.arguments_sha256 != digest for receipt in answer.approvals):
        return None
    approved = replace(
        record,
        status=ToolCallStatus.APPROVED,
        arguments=arguments,
        approved_arguments=arguments,
        approvals=list(answer.approvals),
        proposed_arguments=record.proposed_arguments or record.arguments,
    )
    persistence.AgentToolCalls.set(ctx, record.tool_call_id, approved)
    return approved


class _RunToolStep(_ToolCallStep):
    """Runs one tool call: ``tool_call_started``, then the runner.

    A single-attempt tool first waits for a durable heartbeat (its start is committed).
    Subclasses set the attempt budget; an exhausted budget goes to the failure Step.
    """

    max_attempts: ClassVar[int]
    # Set by the Flow: where a call that asks a question goes (None: it cannot ask).
    questions: RaiseToolQuestion | None = None

    def __init__(self, parts: SessionParts, failure: _RecordFailureStep) -> None:
        super().__init__(parts)
        self._failure = failure

    def base_options(self) -> StepOptions:
        return StepOptions(
            wait_for_durability=SYNC,
            execute_durability=SYNC,
            execute_retry=RetryPolicy(maximum_attempts=self.max_attempts),
        ).on_execute_failure_proceed_to(type(self._failure), self._failure.cached_base_options())

    async def execute(self, context: Context, input: str) -> StepDecision:
        ctx = as_async(context)
        record = _record(ctx, input)
        if record is None or record.status.is_final:
            return StepDecision.dead_end()
        if control_pending(ctx):
            # The turn is being steered or cancelled and this call has not started.
            finish_tool_call(self._parts, ctx, record, ToolCallStatus.CANCELLED)
            return StepDecision.dead_end()
        emit(
            self._parts,
            ctx,
            record.turn_id,
            AgentEventType.TOOL_CALL_STARTED,
            {"tool_call_id": record.tool_call_id, "tool_name": record.tool_name},
        )
        if self.max_attempts == 1:
            # Returns once the server committed this attempt's start: a redelivery can then
            # never run this attempt's tool a second time. A tool whose effect may repeat
            # needs no such proof, and saves the round trip and the commit.
            await ctx.heartbeat(durable=True)
        try:
            async with runner_call(self._parts, ctx, record.turn_id) as writer:
                call = DeferredToolExecution(
                    flow_id=ctx.flow_id,
                    tool_call=record,
                    idempotency_key=record.idempotency_key,
                    attempt=ctx.attempt,
                    events=writer,
                    heartbeat=ctx.heartbeat,
                    answers=tuple(record.answers),
                    framework_run_state=persistence.FrameworkRunState.get(ctx),
                )
                with bind_tool_execution(call):
                    result = await self._parts.runner.execute_deferred_tool_call(call)
        except ToolExecutionError as exc:
            finish_tool_call(self._parts, ctx, record, ToolCallStatus.FAILED, error=exc.message)
            return StepDecision.dead_end()
        except ToolInputRequired as exc:
            return self._ask(ctx, record, exc)
        finish_tool_call(
            self._parts, ctx, record, ToolCallStatus.SUCCEEDED, output=str(result.output)
        )
        return StepDecision.dead_end()

    def _ask(self, ctx: Context, record: AgentToolCall, exc: ToolInputRequired) -> StepDecision:
        if not record.effect.is_retryable or self.questions is None:
            error = SINGLE_ATTEMPT_QUESTION_ERROR
            finish_tool_call(self._parts, ctx, record, ToolCallStatus.FAILED, error=error)
            return StepDecision.dead_end()
        number = len(record.answers) + 1
        waiting = replace(
            record,
            status=ToolCallStatus.AWAITING_APPROVAL,
            interrupt_id=f"{record.turn_id}:{record.tool_call_id}:q{number}",
            question=exc.question,
        )
        persistence.AgentToolCalls.set(ctx, record.tool_call_id, waiting)
        # PendingInterrupts is written under its lock, which this Step does not hold
        # while the tool runs: the next Step raises the interrupt.
        return StepDecision.go_to_many(movement_to(self.questions, record.tool_call_id))


class RaiseToolQuestion(_ToolCallStep):
    """Publishes a running call's question as a ``question`` interrupt, then waits for it."""

    def __init__(self, parts: SessionParts, approval: AwaitToolApproval) -> None:
        super().__init__(parts)
        self._approval = approval

    def base_options(self) -> StepOptions:
        return _interrupt_step_options()

    async def execute(self, context: Context, input: str) -> StepDecision:
        record = _record(context, input)
        if (
            record is None
            or record.status is not ToolCallStatus.AWAITING_APPROVAL
            or record.question is None
            or record.interrupt_id is None
        ):
            return StepDecision.dead_end()
        if control_pending(context):
            finish_tool_call(self._parts, context, record, ToolCallStatus.CANCELLED)
            return StepDecision.dead_end()
        interrupts = pending_interrupts(context)
        if all(i.interrupt_id != record.interrupt_id for i in interrupts):
            now = server_now(context)
            limit = self._parts.options.interrupt_deadline
            deadline = None if limit is None else now + limit.total_seconds()
            interrupts.append(
                AgentInterrupt(
                    interrupt_id=record.interrupt_id,
                    tool_call_id=record.tool_call_id,
                    turn_id=record.turn_id,
                    tool_name=record.tool_name,
                    arguments=record.arguments,
                    created_at=now,
                    deadline=deadline,
                    kind=InterruptKind.QUESTION,
                    question=record.question,
                )
            )
            persistence.PendingInterrupts.set(context, interrupts)
            emit(
                self._parts,
                context,
                record.turn_id,
                AgentEventType.INTERRUPT_RAISED,
                {
                    "interrupt_id": record.interrupt_id,
                    "tool_call_id": record.tool_call_id,
                    "tool_name": record.tool_name,
                    "deadline": deadline,
                    "kind": InterruptKind.QUESTION,
                    "message": record.question.message,
                },
            )
        return StepDecision.go_to_many(movement_to(self._approval, input))


class _RecordFailureStep(_ToolCallStep):
    """Failure route of a tool Step: records the call's final status from the recovery.

    An ``outcome_unknown`` whose explicit policy names ``reconcile`` goes to the read-back
    Step instead; one whose policy sets ``await_reconciliation`` (and no ``reconcile``)
    waits for ``reconcile_tool_call``.
    """

    def __init__(self, parts: SessionParts, reconcile: ReconcileToolCall | None = None) -> None:
        super().__init__(parts)
        self._reconcile = reconcile

    def status_for(self, record: AgentToolCall) -> ToolCallStatus:
        return ToolCallStatus.OUTCOME_UNKNOWN

    async def execute(self, context: Context, input: str) -> StepDecision:
        record = _record(context, input)
        if record is None or record.status.is_final:
            return StepDecision.dead_end()
        recovery = context.recovery_error
        detail = f"{recovery.error_type}: {recovery.detail}" if recovery else "the tool Step failed"
        status = self.status_for(record)
        policy = self._parts.options.tool_policies.get(record.tool_name)
        if status is ToolCallStatus.OUTCOME_UNKNOWN and policy is not None:
            if policy.reconcile is not None and self._reconcile is not None:
                # Still not final: the read-back Step settles it before the model runs.
                persistence.AgentToolCalls.set(context, input, replace(record, error=detail))
                return StepDecision.go_to_many(movement_to(self._reconcile, input))
            if policy.await_reconciliation:
                hold_for_reconciliation(context, replace(record, error=detail))
                return StepDecision.dead_end()
        finish_tool_call(self._parts, context, record, status, error=detail)
        return StepDecision.dead_end()


def hold_for_reconciliation(ctx: Context, record: AgentToolCall) -> None:
    """Leave an unknown outcome waiting for ``reconcile_tool_call`` (not final)."""
    held = replace(record, status=ToolCallStatus.AWAITING_RECONCILIATION)
    persistence.AgentToolCalls.set(ctx, record.tool_call_id, held)


class RecordReconcileFailure(_ToolCallStep):
    """Failure route of ``ReconcileToolCall``: the outcome stays unknown (or waits)."""

    async def execute(self, context: Context, input: str) -> StepDecision:
        record = _record(context, input)
        if record is None or record.status.is_final:
            return StepDecision.dead_end()
        recovery = context.recovery_error
        why = f"{recovery.error_type}: {recovery.detail}" if recovery else "it failed"
        detail = f"{record.error or 'the tool Step failed'}; the read-back failed too ({why})"
        return _unsettled(self._parts, context, replace(record, error=detail))


def _unsettled(parts: SessionParts, ctx: Context, record: AgentToolCall) -> StepDecision:
    policy = parts.options.tool_policies.get(record.tool_name)
    if policy is not None and policy.await_reconciliation:
        hold_for_reconciliation(ctx, record)
    else:
        finish_tool_call(parts, ctx, record, ToolCallStatus.OUTCOME_UNKNOWN, error=record.error)
    return StepDecision.dead_end()


class ReconcileToolCall(_ToolCallStep):
    """Runs the policy's ``reconcile`` read-back for an unknown outcome (3 attempts).

    A ``ReconcileResult`` settles the call as succeeded or failed with its evidence and
    writes ``tool_call_reconciled``; None (cannot tell) leaves it ``outcome_unknown`` or,
    with ``await_reconciliation``, waiting for a person.
    """

    def __init__(self, parts: SessionParts, failure: RecordReconcileFailure) -> None:
        super().__init__(parts)
        self._failure = failure

    def base_options(self) -> StepOptions:
        return StepOptions(
            wait_for_durability=SYNC,
            execute_durability=SYNC,
            execute_retry=RetryPolicy(maximum_attempts=RECONCILE_ATTEMPTS),
        ).on_execute_failure_proceed_to(type(self._failure), self._failure.cached_base_options())

    async def execute(self, context: Context, input: str) -> StepDecision:
        record = _record(context, input)
        if record is None or record.status.is_final:
            return StepDecision.dead_end()
        policy = self._parts.options.tool_policies.get(record.tool_name)
        reconcile = policy.reconcile if policy is not None else None
        if reconcile is None:
            return _unsettled(self._parts, context, record)
        found = reconcile(record)
        if inspect.isawaitable(found):
            found = await found
        if found is None:
            return _unsettled(self._parts, context, record)
        if not isinstance(found, ReconcileResult):
            raise TypeError(f"reconcile must return a ReconcileResult or None, got {found!r}")
        status = ToolCallStatus.SUCCEEDED if found.succeeded else ToolCallStatus.FAILED
        settled = replace(
            record,
            reconciliation=ToolCallReconciliation(
                status=status,
                evidence=found.evidence,
                reconciled_by="reconcile",
                reconciled_at=server_now(context),
                unknown_detail=record.error,
            ),
        )
        emit_reconciled(self._parts, context, settled)
        finish_tool_call(self._parts, context, settled, status, error=record.error)
        return StepDecision.dead_end()


def emit_reconciled(parts: SessionParts, ctx: Context, record: AgentToolCall) -> None:
    """Write ``tool_call_reconciled`` for a record that carries its reconciliation."""
    settled = record.reconciliation
    if settled is None:
        return
    emit(
        parts,
        ctx,
        record.turn_id,
        AgentEventType.TOOL_CALL_RECONCILED,
        {
            "tool_call_id": record.tool_call_id,
            "tool_name": record.tool_name,
            "status": settled.status,
            "reconciled_by": settled.reconciled_by,
            "evidence": settled.evidence,
        },
    )


class RecordToolFailure(_RecordFailureStep):
    """After ``CallTool`` failed: ``failed`` for a read, ``outcome_unknown`` for a write."""

    def __init__(self, parts: SessionParts, reconcile: ReconcileToolCall | None = None) -> None:
        super().__init__(parts, reconcile)

    def status_for(self, record: AgentToolCall) -> ToolCallStatus:
        if record.effect is ToolEffect.READ:
            return ToolCallStatus.FAILED
        return ToolCallStatus.OUTCOME_UNKNOWN


class RecordToolOutcomeUnknown(_RecordFailureStep):
    """After ``CallSingleAttemptTool`` failed: ``outcome_unknown``."""


class CallTool(_RunToolStep):
    """Runs a read or idempotent write: 3 attempts, then ``RecordToolFailure``."""

    max_attempts = 3

    def __init__(self, parts: SessionParts, failure: RecordToolFailure) -> None:
        super().__init__(parts, failure)


class CallSingleAttemptTool(_RunToolStep):
    """Runs a non-idempotent write or unclassified call once; else ``RecordToolOutcomeUnknown``."""

    max_attempts = 1

    def __init__(self, parts: SessionParts, failure: RecordToolOutcomeUnknown) -> None:
        super().__init__(parts, failure)
