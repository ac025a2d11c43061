"""AgentSessionClient: the application's handle on the sessions of one agent Flow."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from dex import (
    AsyncClient,
    DexServiceError,
    RpcLockConflictError,
    StopFlowOptions,
    StopType,
)

from dex_agents._approvals import check_reconcile_request, check_resolve_request
from dex_agents._flow import AgentSessionFlow
from dex_agents._records import (
    AgentEvent,
    AgentMessagesPage,
    AgentSessionStartInput,
    AgentSnapshot,
    AgentUserMessage,
    ListAgentMessagesRequest,
    ReconcileToolCallRequest,
    ResolveInterruptRequest,
)
from dex_agents._rpcs import read_committed_snapshot

T = TypeVar("T")

LOCK_CONFLICT_RETRY_S = 5.0
_LOCK_RETRY_DELAY_S = 0.05
_FOLLOW_BATCH = 100  # events per Stream read while following a session
_FOLLOW_RETRY_FIRST_S = 0.1
_FOLLOW_RETRY_MAX_S = 2.0


@dataclass(frozen=True, kw_only=True)
class AgentEventMessage:
    """One ``AgentEvents`` message with the token that resumes after it.

    Attributes:
        event: the event.
        resume_token: pass it to ``follow_events`` to continue after this event.
        source: ``"#<stepExecutionId>"`` of the Step that wrote it.

    """

    event: AgentEvent
    resume_token: str
    source: str


class AgentSessionClient:
    """Starts sessions of one ``AgentSessionFlow`` and talks to them through its RPCs.

    Args:
        client: an ``AsyncClient`` whose Registry holds ``flow``.
        flow: the registered agent Flow instance.

    Concurrency: safe to share between tasks of one event loop (like ``AsyncClient``).

    """

    def __init__(self, client: AsyncClient, flow: AgentSessionFlow) -> None:
        self.client = client
        self.flow = flow

    async def start_session(self, session_id: str, initial_message: str | None = None) -> str:
        """Start a session (the Flow ID is ``session_id``) and return its run ID.

        A non-blank ``initial_message`` starts the first turn at once. The Flow's
        ``config``, when it has one, becomes the session's ``config_override``.

        Raises:
            FlowAlreadyStartedError: a session with this ID exists.

        """
        start = AgentSessionStartInput(initial_message=initial_message)
        options = self.flow.start_flow_options()
        return await self.client.start_flow(self.flow, session_id, start, options)

    async def send_user_message(self, session_id: str, text: str) -> bool:
        """Queue a user message; False for blank text. A turn in progress finishes first.

        Raises:
            FlowNotActiveOrNotFoundError: the session is stopped or unknown.

        """
        result: bool = await self.client.invoke_rpc(
            self.flow.send_user_message, session_id, AgentUserMessage(text=text)
        )
        return result

    async def resolve_interrupt(
        self,
        session_id: str,
        interrupt_id: str,
        approved: bool,
        rejection_message: str | None = None,
        *,
        answer: Mapping[str, Any] | None = None,
        arguments: str | None = None,
        approver: str | None = None,
        arguments_sha256: str | None = None,
    ) -> bool:
        """Approve or reject a pending tool call; False if it is not pending or expired.

        Retries ``RpcLockConflictError`` (a Step holding ``PendingInterrupts``) for up to
        5 seconds, then raises it. ``rejection_message`` is dropped on approval.

        Beyond the seeds (keyword-only): ``arguments`` (a JSON object as text, at most
        64 KiB) replaces the model's arguments and the tool runs with it; ``approver`` is
        recorded in the approval receipt (as given: the server's tokens carry no subject
        to check it against) and is required when the policy needs several approvals;
        ``arguments_sha256`` (``AgentInterrupt.arguments_sha256`` as you showed it) makes
        the approval return False if the arguments changed since. With
        ``min_approvals`` above 1, each distinct approver's call returns True and the
        tool runs after the last one.

        For a ``question`` interrupt (a running tool asks for input), ``approved=True``
        with ``answer`` (the fields its ``requested_schema`` asks for) answers it, and
        ``approved=False`` declines; either way the call then runs again with the answer.

        Raises:
            InvalidApprovalError: malformed arguments or approver (checked before sending).

        """
        request = ResolveInterruptRequest(
            interrupt_id,
            approved,
            rejection_message,
            arguments=arguments,
            approver=approver,
            arguments_sha256=arguments_sha256,
            answer=None if answer is None else dict(answer),
        )
        check_resolve_request(request)
        return await _retry_lock_conflicts(
            lambda: self._call_bool(self.flow.resolve_interrupt, session_id, request)
        )

    async def reconcile_tool_call(
        self,
        session_id: str,
        tool_call_id: str,
        succeeded: bool,
        note: str,
        *,
        reconciled_by: str = "",
    ) -> bool:
        """Settle a tool call whose outcome is unknown, by hand (beyond the seeds).

        Use it when the tool's policy sets ``await_reconciliation`` and the call waits in
        ``awaiting_reconciliation``: say whether the write took effect and on what
        evidence (``note``, shown to the model). Returns False when the call is not
        waiting. Retries lock conflicts for up to 5 seconds.

        Raises:
            InvalidApprovalError: blank or too long note (checked before sending).

        """
        request = ReconcileToolCallRequest(
            tool_call_id, succeeded, note, reconciled_by=reconciled_by
        )
        check_reconcile_request(request)
        return await _retry_lock_conflicts(
            lambda: self._call_bool(self.flow.reconcile_tool_call, session_id, request)
        )

    async def get_agent_snapshot(self, session_id: str) -> AgentSnapshot:
        """Return state, recent messages, interrupts, tool calls, usage and queue length.

        Reads the committed state from the server's store, so it needs no Worker: a
        person can see a pending approval while the agent's Workers are down (a deploy,
        say). The result equals what the ``get_agent_snapshot`` RPC returns for the same
        committed state. Also works for a stopped session while the server retains it.

        Raises:
            FlowNotFoundError: no such session.

        """
        return await read_committed_snapshot(self.client, session_id)

    async def list_agent_messages(
        self, session_id: str, after_sequence: int = 0, limit: int = 100
    ) -> AgentMessagesPage:
        """Return messages after ``after_sequence``, oldest first; ``limit`` clamped 1..200."""
        request = ListAgentMessagesRequest(after_sequence=after_sequence, limit=limit)
        page: AgentMessagesPage = await self.client.invoke_rpc(
            self.flow.list_agent_messages, session_id, request
        )
        return page

    async def steer_user_message(self, session_id: str, text: str) -> bool:
        """End the running turn at its next safe Step boundary and start one with ``text``.

        False for blank text. Retries lock conflicts for up to 5 seconds.
        """
        message = AgentUserMessage(text=text)
        return await _retry_lock_conflicts(
            lambda: self._call_bool(self.flow.steer_user_message, session_id, message)
        )

    async def cancel_turn(self, session_id: str) -> bool:
        """Cancel the running turn (stops a running model call); False if none runs.

        Retries lock conflicts for up to 5 seconds.
        """
        return await _retry_lock_conflicts(
            lambda: self._call_bool(self.flow.cancel_turn, session_id, None)
        )

    async def stop_session(self, session_id: str, reason: str | None = None) -> None:
        """Stop (cancel) the session's Flow; it stays readable for the retention period.

        Raises:
            FlowNotActiveOrNotFoundError: the session is already stopped or unknown.

        """
        await self.client.stop_flow(
            session_id, StopFlowOptions(type=StopType.CANCEL, reason=reason)
        )

    async def follow_event_messages(
        self, session_id: str, resume_token: str = ""
    ) -> AsyncIterator[AgentEventMessage]:
        """Yield ``AgentEvents`` messages after ``resume_token`` (oldest retained when "").

        Never ends by itself; stop iterating (or cancel the task) when done. It rides out
        a server that restarts or cannot be reached for a while (a deploy): retryable
        errors (``DexServiceError.retryable``) are retried with a backoff of 0.1 s up to
        2 s, resuming after the last event yielded; other errors are raised. The Stream is
        best effort: rebuild a UI from ``get_agent_snapshot`` after a gap (on SQLite the
        events written before a server restart are gone).
        """
        token = resume_token
        delay = _FOLLOW_RETRY_FIRST_S
        while True:
            try:
                # one request per batch of events already written, not one per event
                batch = await self.client.read_stream_messages(
                    session_id, self.flow.agent_events, token, _FOLLOW_BATCH
                )
            except DexServiceError as exc:
                if not exc.retryable:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, _FOLLOW_RETRY_MAX_S)
                continue
            delay = _FOLLOW_RETRY_FIRST_S
            for message in batch:
                token = message.resume_token
                yield AgentEventMessage(
                    event=message.value, resume_token=token, source=message.source
                )

    async def follow_events(
        self, session_id: str, resume_token: str = ""
    ) -> AsyncIterator[AgentEvent]:
        """Yield the session's events after ``resume_token`` (see ``follow_event_messages``)."""
        async for message in self.follow_event_messages(session_id, resume_token):
            yield message.event

    async def _call_bool(self, method: Any, session_id: str, value: Any) -> bool:
        result = await self.client.invoke_rpc(method, session_id, value)
        return bool(result)


async def _retry_lock_conflicts(call: Callable[[], Awaitable[T]]) -> T:
    deadline = time.monotonic() + LOCK_CONFLICT_RETRY_S
    delay = _LOCK_RETRY_DELAY_S
    while True:
        try:
            return await call()
        except RpcLockConflictError:
            if time.monotonic() + delay > deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.5)
