"""Edited arguments, approval receipts, minimum approvals, reconciliation, server-clock deadlines.

Real server, real Worker child processes (``tests.approval_worker``), both stores.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from dex_agents import (
    AgentEventType,
    AgentInterrupt,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSnapshot,
    AgentToolCall,
    InvalidApprovalError,
    MessageRole,
    ToolCallStatus,
    canonical_arguments_sha256,
)
from dex_agents.testing import AgentTestStack, FileGate, wait_for_agent_snapshot

from tests.agent_helpers import assistant_texts, wait_idle
from tests.approval_defs import CLOCK_OFFSET_ENV, LONG_DEADLINE, STATE_DIR_ENV, build_flows

PACKAGE_DIR = Path(__file__).resolve().parents[1]
HOUR = 3600.0


class Approvals:
    def __init__(self, stack: AgentTestStack, flows: dict[str, AgentSessionFlow], state: Path):
        self.stack = stack
        self.state_dir = state
        self.main = stack.sessions(flows["main"])
        self.long = stack.sessions(flows["long"])
        self.short = stack.sessions(flows["short"])


@asynccontextmanager
async def approvals_stack(
    tmp_path: Path, worker_env: Mapping[str, str] | None = None
) -> AsyncIterator[Approvals]:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    flows = build_flows(state)
    env = {STATE_DIR_ENV: str(state), **(worker_env or {})}
    async with AgentTestStack(
        tmp_path,
        list(flows.values()),
        "tests.approval_worker",
        worker_cwd=PACKAGE_DIR,
        worker_env=env,
    ) as stack:
        await stack.start_worker()
        yield Approvals(stack, flows, state)


async def pending(sessions: AgentSessionClient, session_id: str) -> AgentInterrupt:
    return await wait_for_agent_snapshot(
        sessions,
        session_id,
        lambda s: next(iter(s.pending_interrupts), None),
        description="a pending approval",
    )


async def record_where(
    sessions: AgentSessionClient, session_id: str, status: ToolCallStatus
) -> AgentToolCall:
    def probe(snapshot: AgentSnapshot) -> AgentToolCall | None:
        return next((c for c in snapshot.tool_calls if c.status is status), None)

    return await wait_for_agent_snapshot(
        sessions, session_id, probe, description=f"a tool call {status}"
    )


async def events_of(
    sessions: AgentSessionClient, session_id: str, kind: AgentEventType
) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    async for event in sessions.follow_events(session_id):
        if event.type is kind:
            found.append(event.data)
        if event.type in (AgentEventType.TURN_COMPLETED, AgentEventType.TURN_FAILED):
            return found
    return found


async def test_approver_edits_the_arguments(tmp_path: Path) -> None:
    async with approvals_stack(tmp_path) as s:
        await s.main.start_session("edit-1", "refund order 7")
        interrupt = await pending(s.main, "edit-1")
        proposed = json.loads(interrupt.arguments)
        assert proposed == {"order_id": 7, "amount": 30}
        assert interrupt.arguments_sha256 == canonical_arguments_sha256(interrupt.arguments)
        edited = json.dumps({"amount": 20, "order_id": 7})
        with pytest.raises(InvalidApprovalError, match="JSON object"):
            await s.main.resolve_interrupt("edit-1", interrupt.interrupt_id, True, arguments="[1]")
        assert await s.main.resolve_interrupt(
            "edit-1",
            interrupt.interrupt_id,
            True,
            arguments=edited,
            approver="alice@example.com",
            arguments_sha256=interrupt.arguments_sha256,
        )
        # The tool is held at its gate: the record shows what will run and who approved it.
        gate = FileGate(s.state_dir, "refund-turn-1")
        await gate.wait_until_reached()
        record = await record_where(s.main, "edit-1", ToolCallStatus.APPROVED)
        assert json.loads(record.proposed_arguments or "") == proposed
        assert record.approved_arguments == edited == record.arguments
        assert record.arguments_edited
        [receipt] = record.approvals
        assert receipt.approver == "alice@example.com"
        assert receipt.edited
        assert receipt.arguments_sha256 == canonical_arguments_sha256(edited)
        assert abs(receipt.approved_at - time.time()) < 60
        gate.release()
        done = await wait_idle(s.main, "edit-1", turns=1)
        # The model's next message reflects the call as it ran.
        [summary] = assistant_texts(done)
        assert "issue_refund {'amount': 20, 'order_id': 7}: succeeded" in summary
        assert "refunded 20 on order 7" in summary
        assert "approver changed the arguments" in summary
        [call_message] = [
            m.framework_item
            for m in done.messages
            if m.role is MessageRole.ASSISTANT and m.framework_item.get("type") == "tool_call"
        ]
        assert json.loads(call_message["arguments"]) == {"amount": 20, "order_id": 7}
        assert json.loads(call_message["proposed_arguments"]) == proposed
        [resolved] = await events_of(s.main, "edit-1", AgentEventType.INTERRUPT_RESOLVED)
        assert resolved["approvers"] == ["alice@example.com"]
        assert resolved["arguments_edited"] is True


async def test_receipts_count_distinct_approvers_of_the_current_arguments(
    tmp_path: Path,
) -> None:
    async with approvals_stack(tmp_path) as s:
        await s.main.start_session("wire-1", "wire the money")
        interrupt = await pending(s.main, "wire-1")
        assert interrupt.min_approvals == 2
        first_hash = interrupt.arguments_sha256
        iid = interrupt.interrupt_id
        # Several approvals need named approvers.
        assert not await s.main.resolve_interrupt("wire-1", iid, True)
        assert await s.main.resolve_interrupt("wire-1", iid, True, approver="alice")
        # The same approver twice counts once.
        assert not await s.main.resolve_interrupt("wire-1", iid, True, approver="alice")
        still = await pending(s.main, "wire-1")
        assert [a.approver for a in still.approvals] == ["alice"]
        # Bob edits the amount: alice's approval was for other arguments and drops out.
        edited = json.dumps({"account": "A", "amount": 450})
        assert await s.main.resolve_interrupt(
            "wire-1", iid, True, arguments=edited, approver="bob", arguments_sha256=first_hash
        )
        changed = await wait_for_agent_snapshot(
            s.main,
            "wire-1",
            lambda snap: next(
                (i for i in snap.pending_interrupts if i.arguments_sha256 != first_hash), None
            ),
            description="the edited interrupt",
        )
        assert [a.approver for a in changed.approvals] == ["bob"]
        assert json.loads(changed.proposed_arguments or "") == {"account": "A", "amount": 500}
        # A receipt for the arguments as they were is refused, and changes nothing.
        assert not await s.main.resolve_interrupt(
            "wire-1", iid, True, approver="alice", arguments_sha256=first_hash
        )
        assert [a.approver for a in (await pending(s.main, "wire-1")).approvals] == ["bob"]
        # Alice approves what she now sees: two distinct approvals, the wire runs.
        assert await s.main.resolve_interrupt(
            "wire-1", iid, True, approver="alice", arguments_sha256=changed.arguments_sha256
        )
        done = await wait_idle(s.main, "wire-1", turns=1)
        [summary] = assistant_texts(done)
        assert "wire_money {'account': 'A', 'amount': 450}: succeeded" in summary
        assert "wired 450 to A" in summary
        [resolved] = await events_of(s.main, "wire-1", AgentEventType.INTERRUPT_RESOLVED)
        assert resolved["approvers"] == ["bob", "alice"]


async def test_reconcile_function_settles_an_unknown_outcome(tmp_path: Path) -> None:
    async with approvals_stack(tmp_path) as s:
        await s.main.start_session("flaky-1", "flaky refund please")
        done = await wait_idle(s.main, "flaky-1", turns=1)
        [summary] = assistant_texts(done)
        assert "flaky_refund {'amount': 15, 'order_id': 9}: succeeded" in summary
        assert "checked (reconcile) and it took effect: refund RF-9-15 exists" in summary
        [reconciled] = await events_of(s.main, "flaky-1", AgentEventType.TOOL_CALL_RECONCILED)
        assert reconciled["status"] == "succeeded"
        assert reconciled["reconciled_by"] == "reconcile"
        history = await s.stack.read_step_history("flaky-1")
        assert "ReconcileToolCall" in {entry.step_type for entry in history}


async def test_a_person_settles_an_unknown_outcome(tmp_path: Path) -> None:
    async with approvals_stack(tmp_path) as s:
        await s.main.start_session("transfer-1", "transfer to B")
        held = await record_where(s.main, "transfer-1", ToolCallStatus.AWAITING_RECONCILIATION)
        assert "no answer from the bank" in (held.error or "")
        with pytest.raises(InvalidApprovalError, match="note"):
            await s.main.reconcile_tool_call("transfer-1", held.tool_call_id, False, "  ")
        assert not await s.main.reconcile_tool_call("transfer-1", "no-such-call", False, "x")
        assert await s.main.reconcile_tool_call(
            "transfer-1",
            held.tool_call_id,
            False,
            "the bank has no transfer of 70 to B",
            reconciled_by="ops@example.com",
        )
        done = await wait_idle(s.main, "transfer-1", turns=1)
        [summary] = assistant_texts(done)
        assert "lost_transfer {'account': 'B', 'amount': 70}: failed" in summary
        assert (
            "checked (ops@example.com) and it did not take effect: "
            "the bank has no transfer of 70 to B"
        ) in summary
        [reconciled] = await events_of(s.main, "transfer-1", AgentEventType.TOOL_CALL_RECONCILED)
        assert reconciled["status"] == "failed"
        assert reconciled["reconciled_by"] == "ops@example.com"
        # Settled once: a second attempt finds nothing waiting.
        assert not await s.main.reconcile_tool_call(
            "transfer-1", held.tool_call_id, True, "changed my mind"
        )


async def test_deadline_is_on_the_server_clock_with_the_worker_an_hour_ahead(
    tmp_path: Path,
) -> None:
    async with approvals_stack(tmp_path, {CLOCK_OFFSET_ENV: str(HOUR)}) as s:
        await s.long.start_session("ahead-1", "refund order 7")
        interrupt = await pending(s.long, "ahead-1")
        # Raised and timed on the server's clock (this process shares it), not the Worker's.
        assert interrupt.deadline is not None
        assert abs(interrupt.created_at - time.time()) < 30
        assert interrupt.deadline - interrupt.created_at == LONG_DEADLINE.total_seconds()
        # With the Worker's clock an hour ahead, the approval is still accepted.
        assert await s.long.resolve_interrupt("ahead-1", interrupt.interrupt_id, True)
        done = await wait_idle(s.long, "ahead-1", turns=1)
        assert "refunded 30 on order 7" in assistant_texts(done)[0]


async def test_deadline_expires_on_the_server_clock_with_the_worker_an_hour_behind(
    tmp_path: Path,
) -> None:
    async with approvals_stack(tmp_path, {CLOCK_OFFSET_ENV: str(-HOUR)}) as s:
        await s.short.start_session("behind-1", "refund order 7")
        interrupt = await pending(s.short, "behind-1")
        assert abs(interrupt.created_at - time.time()) < 30
        # Nobody answers: the server's Timer expires it, whatever the Worker's clock says.
        done = await wait_idle(s.short, "behind-1", turns=1)
        [summary] = assistant_texts(done)
        assert "issue_refund {'amount': 30, 'order_id': 7}: rejected" in summary
        assert "deadline passed" in summary
        assert not await s.short.resolve_interrupt("behind-1", interrupt.interrupt_id, True)
