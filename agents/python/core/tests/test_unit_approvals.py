"""Pure approval rules: hashes, edits, receipts, approval counts, reconciled texts."""

from __future__ import annotations

import json

import pytest
from dex_agents import (
    AgentInterrupt,
    AgentToolCall,
    ApprovalReceipt,
    InvalidApprovalError,
    ResolveInterruptRequest,
    ToolCallReconciliation,
    ToolCallStatus,
    ToolEffect,
    ToolPolicy,
    build_turn_failure_note,
    canonical_arguments_sha256,
    describe_tool_call_outcome,
    is_approval_required,
)
from dex_agents._approvals import (
    MAX_EDITED_ARGUMENTS_BYTES,
    apply_approval,
    check_edited_arguments,
    check_resolve_request,
)
from msgspec.structs import replace

ARGS = json.dumps({"order_id": 7, "amount": 30})


def interrupt(min_approvals: int = 1) -> AgentInterrupt:
    return AgentInterrupt(
        interrupt_id="turn-1:c1",
        tool_call_id="c1",
        turn_id="turn-1",
        tool_name="issue_refund",
        arguments=ARGS,
        created_at=100.0,
        arguments_sha256=canonical_arguments_sha256(ARGS),
        min_approvals=min_approvals,
    )


def record(status: ToolCallStatus, **fields: object) -> AgentToolCall:
    base = AgentToolCall(
        tool_call_id="c1",
        turn_id="turn-1",
        tool_name="issue_refund",
        arguments=ARGS,
        proposed_arguments=ARGS,
        effect=ToolEffect.NON_IDEMPOTENT_WRITE,
        requires_approval=True,
        deferral_order=0,
        status=status,
        idempotency_key="s/turn-1/c1",
    )
    return replace(base, **fields)


def test_the_hash_is_of_canonical_json() -> None:
    assert canonical_arguments_sha256('{"b": 1, "a": 2}') == canonical_arguments_sha256(
        '{"a":2,"b":1}'
    )
    assert canonical_arguments_sha256('{"a": 1}') != canonical_arguments_sha256('{"a": 2}')
    assert len(canonical_arguments_sha256("not json")) == 64


def test_edited_arguments_are_checked() -> None:
    with pytest.raises(InvalidApprovalError, match="JSON object"):
        check_edited_arguments("[1]")
    with pytest.raises(InvalidApprovalError, match="not valid JSON"):
        check_edited_arguments("{")
    with pytest.raises(InvalidApprovalError, match="MAX_EDITED_ARGUMENTS_BYTES"):
        check_edited_arguments(json.dumps({"x": "a" * MAX_EDITED_ARGUMENTS_BYTES}))
    with pytest.raises(InvalidApprovalError, match="only accepted with an approval"):
        check_resolve_request(ResolveInterruptRequest("i", False, None, arguments="{}"))
    with pytest.raises(InvalidApprovalError, match="MAX_APPROVER_CHARS"):
        check_resolve_request(ResolveInterruptRequest("i", True, approver="x" * 201))


def test_the_seeds_positional_shape_still_works() -> None:
    request = ResolveInterruptRequest("turn-1:c1", False, "too much")
    assert (request.arguments, request.approver, request.arguments_sha256) == (None, None, None)


def test_one_approval_completes_and_an_edit_is_recorded() -> None:
    edited = json.dumps({"order_id": 7, "amount": 20})
    request = ResolveInterruptRequest("turn-1:c1", True, arguments=edited, approver="ann")
    outcome = apply_approval(interrupt(), request, 200.0)
    assert outcome.applies and outcome.complete
    assert outcome.interrupt.arguments == edited
    assert outcome.interrupt.proposed_arguments == ARGS
    [receipt] = outcome.interrupt.approvals
    assert receipt == ApprovalReceipt(
        approver="ann",
        approved_at=200.0,
        arguments_sha256=canonical_arguments_sha256(edited),
        edited=True,
    )


def test_the_same_arguments_reformatted_are_not_an_edit() -> None:
    same = json.dumps({"amount": 30, "order_id": 7}, indent=2)
    outcome = apply_approval(interrupt(), ResolveInterruptRequest("i", True, arguments=same), 1.0)
    assert outcome.complete and outcome.interrupt.arguments == ARGS
    assert not outcome.interrupt.approvals[0].edited
    assert outcome.interrupt.proposed_arguments is None


def test_a_stale_hash_does_not_apply() -> None:
    stale = ResolveInterruptRequest("i", True, arguments_sha256=canonical_arguments_sha256("{}"))
    outcome = apply_approval(interrupt(), stale, 1.0)
    assert not outcome.applies and outcome.interrupt == interrupt()


def test_min_approvals_needs_distinct_named_approvers_of_the_same_arguments() -> None:
    pending = interrupt(min_approvals=2)
    assert not apply_approval(pending, ResolveInterruptRequest("i", True), 1.0).applies
    first = apply_approval(pending, ResolveInterruptRequest("i", True, approver="ann"), 1.0)
    assert first.applies and not first.complete
    again = apply_approval(first.interrupt, ResolveInterruptRequest("i", True, approver="ann"), 2)
    assert not again.applies
    edit = ResolveInterruptRequest("i", True, arguments='{"amount": 1}', approver="bob")
    edited = apply_approval(first.interrupt, edit, 3.0)
    # Ann approved other arguments: only Bob's approval counts now.
    assert edited.applies and not edited.complete
    assert [a.approver for a in edited.interrupt.approvals] == ["bob"]
    done = apply_approval(edited.interrupt, ResolveInterruptRequest("i", True, approver="ann"), 4)
    assert done.complete
    assert [a.approver for a in done.interrupt.approvals] == ["bob", "ann"]


def test_policy_validation() -> None:
    assert is_approval_required(ToolPolicy(ToolEffect.READ, min_approvals=2))
    with pytest.raises(ValueError, match="MAX_MIN_APPROVALS"):
        ToolPolicy(ToolEffect.READ, min_approvals=11)
    with pytest.raises(ValueError, match="requires_approval"):
        ToolPolicy(ToolEffect.READ, requires_approval=False, min_approvals=2)
    with pytest.raises(TypeError, match="callable"):
        ToolPolicy(ToolEffect.READ, reconcile="find_refund")  # type: ignore[arg-type]


def test_texts_of_edited_and_reconciled_calls() -> None:
    edited = json.dumps({"order_id": 7, "amount": 20})
    ran = record(ToolCallStatus.SUCCEEDED, arguments=edited, output="refunded 20")
    assert describe_tool_call_outcome(ran) == (
        f"[The approver changed the arguments; the call ran with {edited}] refunded 20"
    )
    settled = ToolCallReconciliation(
        status=ToolCallStatus.FAILED,
        evidence="no refund RF-7 exists",
        reconciled_by="ops",
        reconciled_at=5.0,
        unknown_detail="ConnectionError: closed",
    )
    failed = record(ToolCallStatus.FAILED, reconciliation=settled, error="ConnectionError: closed")
    text = describe_tool_call_outcome(failed)
    assert text == (
        "The outcome of this tool call was unknown at first; it was then checked (ops) and it "
        "did not take effect: no refund RF-7 exists"
    )
    # The failure note of a later failed turn uses the reconciled outcome.
    assert text in build_turn_failure_note([failed])
    with pytest.raises(ValueError, match="not final"):
        describe_tool_call_outcome(record(ToolCallStatus.AWAITING_RECONCILIATION))
