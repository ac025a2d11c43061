"""AgentSessionFlow: one durable agent session per Flow execution."""

from __future__ import annotations

from dex import (
    Context,
    Flow,
    FlowConfig,
    PersistenceSchema,
    RPCResult,
    StartFlowOptions,
    StepList,
    StepMovement,
    Stream,
    rpc,
)
from msgspec.structs import replace

from dex_agents._enums import AgentStatus, TurnControlKind
from dex_agents._persistence import AGENT_EVENTS, persistence
from dex_agents._policy import AgentSessionOptions
from dex_agents._records import (
    AgentEvent,
    AgentMessagesPage,
    AgentSessionStartInput,
    AgentSnapshot,
    AgentState,
    AgentUserMessage,
    ListAgentMessagesRequest,
    ReconcileToolCallRequest,
    ResolveInterruptRequest,
    UserInputCounts,
)
from dex_agents._rpcs import (
    TurnStopPlan,
    apply_turn_stop,
    get_agent_snapshot,
    list_agent_messages,
    plan_turn_stop,
    reconcile_tool_call,
    resolve_interrupt,
    send_user_message,
)
from dex_agents._runner import AgentFrameworkRunner
from dex_agents._session import SessionParts
from dex_agents._text import is_blank
from dex_agents._tool_steps import (
    AwaitToolApproval,
    CallSingleAttemptTool,
    CallTool,
    RaiseToolQuestion,
    ReconcileToolCall,
    RecordReconcileFailure,
    RecordToolFailure,
    RecordToolOutcomeUnknown,
)
from dex_agents._turn_steps import (
    AwaitUserMessage,
    RecordTurnFailure,
    ResumeTurn,
    RunModel,
    StartAgentSession,
    StopTurn,
    ToolSteps,
    first_model_call,
    open_turn,
)

DEFAULT_FLOW_TYPE = "AgentSession"

_STOP_LOCKS = (persistence.PendingInterrupts.lock(),)
_STOP_LOADS = (persistence.AgentToolCalls,)
_STOP_CHANNELS = (persistence.TurnControl,)


class AgentSessionFlow(Flow[AgentSessionStartInput]):
    """A durable agent session: every model call and every tool call is its own Step.

    Register one per agent, each with its own ``flow_type``, in a
    ``Registry(..., allow_async_handlers=True)`` served by an ``AsyncWorker`` with enough
    task slots for the largest batch of parallel tool calls. A session never completes
    by itself; stop it with ``AsyncClient.stop_flow`` (or ``AgentSessionClient.stop_session``).

    Args:
        runner: the framework adapter.
        flow_type: the Flow type name (default ``"AgentSession"``).
        options: tool policies, the default effect, the events Stream capacity and the
            approval deadline (default ``AgentSessionOptions()``).
        config: a ``dex.FlowConfig`` that ``AgentSessionClient.start_session`` passes as
            ``StartFlowOptions.config_override`` of every session it starts; None (default)
            keeps the server's defaults. Every Step sets SYNC durability on both methods,
            so ``FlowConfig(step_durability=StepDurability.ASYNC)`` never replays a Step.

    Raises:
        TypeError: ``config`` is not a ``dex.FlowConfig``.

    Attributes:
        runner: the runner.
        options: the options.
        config: the Flow-level config given at construction, or None.
        agent_events: this Flow type's ``AgentEvents`` Stream of ``AgentEvent``.

    """

    def __init__(
        self,
        runner: AgentFrameworkRunner,
        *,
        flow_type: str = DEFAULT_FLOW_TYPE,
        options: AgentSessionOptions | None = None,
        config: FlowConfig | None = None,
    ) -> None:
        if config is not None:
            _check_flow_config(config)
        self.runner = runner
        self.options = options or AgentSessionOptions()
        self.config = config
        self._flow_type = flow_type
        self.agent_events: Stream[AgentEvent] = Stream(
            AGENT_EVENTS, AgentEvent, self.options.agent_events_capacity_bytes
        )
        parts = SessionParts(runner=runner, options=self.options, events=self.agent_events)
        self._parts = parts
        reconcile_failure = RecordReconcileFailure(parts)
        reconcile = ReconcileToolCall(parts, reconcile_failure)
        record_failure = RecordToolFailure(parts, reconcile)
        record_unknown = RecordToolOutcomeUnknown(parts, reconcile)
        call = CallTool(parts, record_failure)
        single = CallSingleAttemptTool(parts, record_unknown)
        approval = AwaitToolApproval(parts, {True: call, False: single})
        questions = RaiseToolQuestion(parts, approval)
        call.questions = questions
        self._start = StartAgentSession(parts)
        self._steps = (
            AwaitUserMessage(parts),
            RunModel(parts, ToolSteps(approval=approval, call=call, single=single)),
            approval,
            call,
            single,
            record_failure,
            record_unknown,
            reconcile,
            reconcile_failure,
            ResumeTurn(parts),
            RecordTurnFailure(parts),
            StopTurn(parts),
            questions,
        )

    def get_flow_type(self) -> str:
        """Return the Flow type given at construction."""
        return self._flow_type

    def start_flow_options(self) -> StartFlowOptions:
        """Return the ``StartFlowOptions`` a session of this Flow starts with.

        They carry ``config`` as ``config_override`` when one was given, else they are
        ``StartFlowOptions()``. ``AgentSessionClient.start_session`` uses them; code that
        calls ``AsyncClient.start_flow`` itself should pass them too.
        """
        if self.config is None:
            return StartFlowOptions()
        return StartFlowOptions(config_override=self.config)

    def get_steps(self) -> StepList[AgentSessionStartInput]:
        """Return ``StartAgentSession`` as the start Step, then every other Step."""
        return StepList.start_step(self._start).other_steps(*self._steps)

    def get_persistence_schema(self) -> PersistenceSchema:
        """Return the shared declarations plus this Flow type's ``AgentEvents`` Stream."""
        p = persistence
        return PersistenceSchema.of(
            p.AgentState,
            p.AgentMessages,
            p.FrameworkRunState,
            p.AgentToolCalls,
            p.PendingInterrupts,
            p.AgentUsage,
            p.QueuedUserMessages,
            p.InterruptResolutions,
            p.ToolCallResults,
            p.TurnControl,
            p.UserInputCounts,
            self.agent_events,
        )

    @rpc(is_transactional=True)
    async def send_user_message(self, context: Context, input: AgentUserMessage) -> RPCResult[bool]:
        """Queue a user message for the next turn. Transactional; False for blank text.

        When the session is idle (no turn running, nothing queued, no steer or cancel
        waiting), the message does not wait in ``QueuedUserMessages``: this RPC stores it,
        opens the turn and schedules its first ``RunModel`` in its own commit, cancelling
        the waiting ``AwaitUserMessage`` (beyond the seeds: one Step fewer per turn).
        """
        if is_blank(input.text):
            return RPCResult(False)
        state = persistence.AgentState.get(context)
        if state is not None and _is_idle(context, state):
            try:
                opened = open_turn(self._parts, context, state, input.text)
            except Exception:
                # A runner whose user message fails validation: queue the text, so that
                # AwaitUserMessage fails the way it always did.
                opened = None
            if opened is not None:
                persistence.AgentState.set(context, replace(opened, turn_start_unannounced=True))
                return RPCResult(
                    True,
                    next_steps=(first_model_call(opened),),
                    canceling_steps=(AwaitUserMessage,),
                )
        return RPCResult(send_user_message(context, input))

    @rpc(lock_attributes=(persistence.PendingInterrupts.lock(),))
    async def resolve_interrupt(self, context: Context, input: ResolveInterruptRequest) -> bool:
        """Approve or reject a pending tool call.

        Locks ``PendingInterrupts``; removes the interrupt and publishes the answer in one
        commit. Returns False when it is not pending or its deadline passed. A concurrent
        Step holding the lock makes it raise ``RpcLockConflictError`` (retry).

        Beyond the seeds: ``input.arguments`` edits the arguments the tool runs with,
        ``input.approver`` is recorded in the receipt, ``input.arguments_sha256`` makes the
        approval apply only to the arguments the approver saw, and a policy's
        ``min_approvals`` keeps the interrupt pending until enough distinct approvers
        answered (each returns True). A malformed request raises ``InvalidApprovalError``.
        """
        return resolve_interrupt(context, input)

    @rpc(
        lock_attributes=(persistence.PendingInterrupts.lock(),),
        load_attribute_maps=(persistence.AgentToolCalls,),
    )
    async def reconcile_tool_call(self, context: Context, input: ReconcileToolCallRequest) -> bool:
        """Settle a call waiting in ``awaiting_reconciliation`` by hand (beyond the seeds).

        The call becomes ``succeeded`` or ``failed`` with the note as its evidence, and the
        model sees that outcome when the turn resumes. Returns False when the call is not
        waiting for reconciliation. A blank note raises ``InvalidApprovalError``.
        """
        return reconcile_tool_call(context, input)

    @rpc(load_attribute_maps=(persistence.AgentToolCalls,))
    async def get_agent_snapshot(self, context: Context) -> AgentSnapshot:
        """Return the session's snapshot; also served by retained closed sessions."""
        return await get_agent_snapshot(context)

    @rpc
    async def list_agent_messages(
        self, context: Context, input: ListAgentMessagesRequest
    ) -> AgentMessagesPage:
        """Return stored messages after ``input.after_sequence``, oldest first (1..200)."""
        return await list_agent_messages(context, input)

    @rpc(
        lock_attributes=_STOP_LOCKS,
        load_attribute_maps=_STOP_LOADS,
        load_channels=_STOP_CHANNELS,
    )
    async def steer_user_message(
        self, context: Context, input: AgentUserMessage
    ) -> RPCResult[bool]:
        """End the running turn at its next safe Step boundary and start one with this text.

        What ran stays recorded and is summarised to the model in a note; calls waiting
        for approval are cancelled; a started tool call always finishes. With no turn
        running, the text starts the next turn. False (and nothing changes) for blank text.
        """
        if is_blank(input.text):
            return RPCResult(False)
        plan = plan_turn_stop(context, TurnControlKind.STEER)
        apply_turn_stop(context, TurnControlKind.STEER, input.text, plan)
        return RPCResult(True, canceling_steps=_approval_steps(plan))

    @rpc(
        lock_attributes=_STOP_LOCKS,
        load_attribute_maps=_STOP_LOADS,
        load_channels=_STOP_CHANNELS,
    )
    async def cancel_turn(self, context: Context) -> RPCResult[bool]:
        """Cancel the running turn; no new turn starts until the next user message.

        A running model call is stopped and its answer dropped; calls waiting for approval
        are cancelled; started tool calls finish and are recorded. Returns False when no
        turn is running (and no steer is waiting).
        """
        plan = plan_turn_stop(context, TurnControlKind.CANCEL)
        if not plan.publish:
            return RPCResult(False)
        apply_turn_stop(context, TurnControlKind.CANCEL, "", plan)
        if not plan.interrupt_model:
            return RPCResult(True, canceling_steps=_approval_steps(plan))
        return RPCResult(
            True,
            next_steps=(StepMovement.of(StopTurn),),
            canceling_steps=(RunModel, RecordTurnFailure, StopTurn),
        )


def _is_idle(context: Context, state: AgentState) -> bool:
    # AwaitUserMessage is waiting (every Step that leaves a turn goes to it in the commit
    # that writes this status), and it has nothing to fire on yet: nothing queued, and
    # nothing it took already (a message it took has left the Channel before its execute
    # commits; cancelling it then would lose the message).
    counts = persistence.UserInputCounts.get(context) or UserInputCounts()
    return (
        state.active_turn_id is None
        and state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
        and persistence.QueuedUserMessages.size(context) == 0
        and persistence.TurnControl.size(context) == 0
        and counts.queued_messages == state.taken_messages
        and counts.published_controls == state.taken_controls
    )


def _check_flow_config(config: object) -> None:
    if not isinstance(config, FlowConfig):
        raise TypeError(f"config must be a dex.FlowConfig, got {config!r}")


def _approval_steps(plan: TurnStopPlan) -> tuple[type[AwaitToolApproval], ...]:
    # The RPC records the waiting calls cancelled; their AwaitToolApproval executions would
    # otherwise wait for an answer (or a deadline) that can no longer matter, for ever.
    return (AwaitToolApproval,) if plan.cancel_approvals else ()
