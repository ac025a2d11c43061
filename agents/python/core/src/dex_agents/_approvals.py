"""Pure approval rules: argument hashes, edits, receipts and approval counts.

``resolve_interrupt`` and ``reconcile_tool_call`` call these with what they loaded and
write what they return; nothing here touches the session's state.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from dex import Context
from msgspec.structs import replace

from dex_agents._records import (
    AgentInterrupt,
    ApprovalReceipt,
    ReconcileToolCallRequest,
    ResolveInterruptRequest,
)

MAX_EDITED_ARGUMENTS_BYTES = 64 * 1024
MAX_APPROVER_CHARS = 200
MAX_RECONCILE_NOTE_CHARS = 4000


class InvalidApprovalError(ValueError):
    """An approval, rejection or reconciliation request is malformed; nothing changed."""


def server_now(ctx: Context) -> float:
    """Unix seconds on the server's clock for this invocation.

    The server stamps every task it dispatches (``first_attempt_at``); for an RPC that is
    the moment the server received it, so the Worker's own clock is never consulted.
    """
    return ctx.first_attempt_at.timestamp()


def canonical_arguments(arguments: str) -> str:
    """Return the canonical JSON text of tool arguments (sorted keys, no spaces).

    Text that is not JSON is returned as it is, so every call has a canonical form.
    """
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        return arguments
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_arguments_sha256(arguments: str) -> str:
    """Return the hex sha256 of ``canonical_arguments(arguments)`` (UTF-8)."""
    return hashlib.sha256(canonical_arguments(arguments).encode()).hexdigest()


def check_edited_arguments(arguments: str) -> str:
    """Validate an approver's edited arguments: a JSON object of at most 64 KiB.

    Raises:
        InvalidApprovalError: not text, too large (``MAX_EDITED_ARGUMENTS_BYTES``) or not a
            JSON object.

    """
    if not isinstance(arguments, str):
        raise InvalidApprovalError(f"arguments must be JSON text, got {type(arguments).__name__}")
    size = len(arguments.encode())
    if size > MAX_EDITED_ARGUMENTS_BYTES:
        raise InvalidApprovalError(
            f"edited arguments are {size} bytes; the limit is {MAX_EDITED_ARGUMENTS_BYTES} "
            "(MAX_EDITED_ARGUMENTS_BYTES)"
        )
    try:
        value = json.loads(arguments)
    except ValueError as exc:
        raise InvalidApprovalError(f"edited arguments are not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidApprovalError("edited arguments must be a JSON object")
    return arguments


def check_identity(value: str | None, what: str) -> str:
    """Return a stripped identity string (or ""), at most ``MAX_APPROVER_CHARS`` long.

    Raises:
        InvalidApprovalError: not a string, or too long.

    """
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InvalidApprovalError(f"{what} must be a string")
    text = value.strip()
    if len(text) > MAX_APPROVER_CHARS:
        raise InvalidApprovalError(
            f"{what} is {len(text)} characters; the limit is {MAX_APPROVER_CHARS} "
            "(MAX_APPROVER_CHARS)"
        )
    return text


def check_resolve_request(request: ResolveInterruptRequest) -> None:
    """Validate a ``resolve_interrupt`` request before anything is read or written.

    Raises:
        InvalidApprovalError: edited arguments on a rejection, or any field malformed.

    """
    if request.arguments is not None:
        if not request.approved:
            raise InvalidApprovalError("edited arguments are only accepted with an approval")
        check_edited_arguments(request.arguments)
    check_identity(request.approver, "approver")
    if request.arguments_sha256 is not None and not isinstance(request.arguments_sha256, str):
        raise InvalidApprovalError("arguments_sha256 must be a hex string")


def check_reconcile_request(request: ReconcileToolCallRequest) -> None:
    """Validate a ``reconcile_tool_call`` request.

    Raises:
        InvalidApprovalError: blank or too long note (``MAX_RECONCILE_NOTE_CHARS``), or a
            malformed ``reconciled_by``.

    """
    if not isinstance(request.note, str) or not request.note.strip():
        raise InvalidApprovalError("a reconciliation needs a non-blank note (its evidence)")
    if len(request.note) > MAX_RECONCILE_NOTE_CHARS:
        raise InvalidApprovalError(
            f"the note is {len(request.note)} characters; the limit is "
            f"{MAX_RECONCILE_NOTE_CHARS} (MAX_RECONCILE_NOTE_CHARS)"
        )
    check_identity(request.reconciled_by, "reconciled_by")


@dataclass(frozen=True, kw_only=True)
class ApprovalOutcome:
    """What an approval does to its interrupt.

    Attributes:
        applies: False when the approval does not count (stale hash, repeated approver,
            or no approver where several are needed); nothing changes then.
        interrupt: the interrupt with the approval added (and any edit applied).
        complete: whether enough distinct approvals now cover the current arguments.

    """

    applies: bool
    interrupt: AgentInterrupt
    complete: bool = False


def apply_approval(
    interrupt: AgentInterrupt, request: ResolveInterruptRequest, now: float
) -> ApprovalOutcome:
    """Decide what one approval does to a pending interrupt (pure).

    An approval carrying ``arguments_sha256`` counts only while the interrupt's arguments
    still hash to it. An edit replaces the arguments and drops the approvals given for
    the old ones. With ``min_approvals`` above 1, each approval needs an approver not
    already counted.
    """
    current = interrupt.arguments
    current_hash = interrupt.arguments_sha256 or canonical_arguments_sha256(current)
    if request.arguments_sha256 is not None and request.arguments_sha256 != current_hash:
        return ApprovalOutcome(applies=False, interrupt=interrupt)
    approver = check_identity(request.approver, "approver")
    arguments, arguments_hash, edited = current, current_hash, False
    if request.arguments is not None:
        edited_hash = canonical_arguments_sha256(request.arguments)
        if edited_hash != current_hash:
            arguments, arguments_hash, edited = request.arguments, edited_hash, True
    kept = [a for a in interrupt.approvals if a.arguments_sha256 == arguments_hash]
    if interrupt.min_approvals > 1 and (not approver or approver in {a.approver for a in kept}):
        return ApprovalOutcome(applies=False, interrupt=interrupt)
    receipt = ApprovalReceipt(
        approver=approver, approved_at=now, arguments_sha256=arguments_hash, edited=edited
    )
    approvals = [*kept, receipt]
    updated = replace(
        interrupt,
        arguments=arguments,
        arguments_sha256=arguments_hash,
        approvals=approvals,
        # The model's arguments, kept from the first edit on.
        proposed_arguments=interrupt.proposed_arguments or (current if edited else None),
    )
    return ApprovalOutcome(
        applies=True, interrupt=updated, complete=len(approvals) >= interrupt.min_approvals
    )
