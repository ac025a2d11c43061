"""Decision application: which executions a result creates, cancels or closes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import msgspec
from dex._protocol import DecisionSpec, Movement, StepOptionsSpec, WaitSpec

from dex_server.engine.ids import format_execution_id


class InvalidDecisionError(Exception):
    """A handler result is invalid (INVALID_USER_FLOW_CODE).

    It names a Step type the Flow does not define, or is a ``go_to`` with no movement.
    """


class LiveExecution(msgspec.Struct, frozen=True, kw_only=True):
    """An execution that is queued, running or waiting."""

    execution_id: str
    step_type: str
    from_execution_id: str


class NewExecution(msgspec.Struct, frozen=True, kw_only=True):
    """An execution a movement creates."""

    execution_id: str
    step_type: str
    from_execution_id: str
    input: bytes | None
    options: StepOptionsSpec | None
    wait: WaitSpec | None = None
    """The Step's ``wait_for`` result the Worker computed inline (``wait_for_inline``)."""


@dataclass(frozen=True, kw_only=True)
class CloseRequest:
    """Close the Flow now with this status."""

    status: Literal["completed", "failed"]
    output: bytes | None = None
    error_type: str | None = None
    error_message: str | None = None


class DecisionPlan(msgspec.Struct, frozen=True, kw_only=True):
    """What one ``execute`` decision does.

    Attributes:
        new: executions to create.
        cancel: live executions to cancel (never the ones in ``new``).
        close: close the Flow now (force decisions).
        graceful: the Flow should close once nothing is live.
        completion_output: output recorded as a completion (``None``: no completion).
        counters: per-Step-type counters after ``new``.

    """

    new: list[NewExecution] = []
    cancel: list[str] = []
    close: CloseRequest | None = None
    graceful: bool = False
    completion_output: bytes | None = None
    counters: dict[str, int] = {}


def plan_movements(
    movements: Iterable[Movement],
    *,
    from_execution_id: str,
    step_types: set[str] | frozenset[str],
    counters: dict[str, int],
) -> tuple[list[NewExecution], dict[str, int]]:
    """Turn movements into new executions, numbering them with per-type counters.

    Raises:
        InvalidDecisionError: a movement names an unknown Step type (nothing is planned).

    """
    movements = list(movements)
    for m in movements:
        if m.step_type not in step_types:
            raise InvalidDecisionError(f"unknown Step type {m.step_type!r} in a movement")
    counters = dict(counters)
    new: list[NewExecution] = []
    for m in movements:
        n = counters.get(m.step_type, 0) + 1
        counters[m.step_type] = n
        new.append(
            NewExecution(
                execution_id=format_execution_id(m.step_type, n),
                step_type=m.step_type,
                from_execution_id=from_execution_id,
                input=bytes(m.input) if m.input is not None else None,
                options=m.options,
                wait=m.wait,
            )
        )
    return new, counters


def plan_step_cancellation(
    *,
    live: Sequence[LiveExecution],
    current_id: str | None,
    cancel_steps: Iterable[str],
    cancel_sibling_steps: Iterable[str] = (),
    from_execution_id: str = "",
) -> list[str]:
    """Ids of live executions that ``cancel_steps`` / ``cancel_sibling_steps`` cancel.

    The current execution is never cancelled by its own decision.
    """
    types = set(cancel_steps)
    siblings = set(cancel_sibling_steps)
    out: list[str] = []
    for e in live:
        if e.execution_id == current_id:
            continue
        if e.step_type in types or (
            e.step_type in siblings and e.from_execution_id == from_execution_id
        ):
            out.append(e.execution_id)
    return out


def plan_decision(
    decision: DecisionSpec,
    *,
    current: LiveExecution,
    live: Sequence[LiveExecution],
    step_types: set[str] | frozenset[str],
    counters: dict[str, int],
) -> DecisionPlan:
    """Plan the effects of an ``execute`` decision of execution ``current``.

    ``live`` lists the other live executions (a snapshot before this decision).

    Raises:
        InvalidDecisionError: a movement or cancel target names an unknown Step type.

    """
    for name in (*decision.cancel_steps, *decision.cancel_sibling_steps):
        if name not in step_types:
            raise InvalidDecisionError(f"unknown Step type {name!r} to cancel")
    cancel = plan_step_cancellation(
        live=live,
        current_id=current.execution_id,
        cancel_steps=decision.cancel_steps,
        cancel_sibling_steps=decision.cancel_sibling_steps,
        from_execution_id=current.from_execution_id,
    )
    output = bytes(decision.output) if decision.output is not None else None
    if decision.kind == "go_to":
        if not decision.movements:
            # not a dead end: a Flow would stay running with nothing active and no owner
            raise InvalidDecisionError("a go_to decision names no Step to go to")
        new, counters = plan_movements(
            decision.movements,
            from_execution_id=current.execution_id,
            step_types=step_types,
            counters=counters,
        )
        return DecisionPlan(new=new, cancel=cancel, counters=counters)
    if decision.kind == "graceful_complete":
        return DecisionPlan(
            cancel=cancel, graceful=True, completion_output=output, counters=counters
        )
    if decision.kind == "force_complete":
        return DecisionPlan(
            close=CloseRequest(status="completed", output=output),
            completion_output=output,
            counters=counters,
        )
    if decision.kind == "force_fail":
        return DecisionPlan(
            close=CloseRequest(
                status="failed",
                error_type="STEP_DECISION_FAILING_FLOW",
                error_message=decision.reason or "the Flow was failed by a Step decision",
            ),
            counters=counters,
        )
    return DecisionPlan(cancel=cancel, counters=counters)  # dead_end


def channels_empty(
    sizes: Mapping[str, int],
    *,
    channels: Iterable[str],
    channel_maps: Iterable[str],
    publishing: Iterable[str] = (),
) -> bool:
    """Whether every Channel and every instance of every ChannelMap holds no message.

    ``sizes`` are pending counts by physical name (``"<map>/<key>"`` for instances);
    ``publishing`` names the Channels the deciding result publishes to (they count).
    """
    pending = {name for name, n in sizes.items() if n > 0} | set(publishing)
    wanted = set(channels)
    prefixes = tuple(f"{m}/" for m in channel_maps)
    return not any(name in wanted or (prefixes and name.startswith(prefixes)) for name in pending)


def resolve_conditional_complete(decision: DecisionSpec, *, empty: bool) -> DecisionSpec:
    """Turn ``force_complete_if_channels_empty`` into the decision it makes.

    ``force_complete`` when the channels are ``empty``, else ``go_to`` its fallback.
    Other decisions come back as they are.

    Raises:
        InvalidDecisionError: the decision has no fallback movement, or more than one.

    """
    if decision.kind != "force_complete_if_channels_empty":
        return decision
    if len(decision.movements) != 1:
        raise InvalidDecisionError(
            "force_complete_if_channels_empty needs exactly one fallback movement"
        )
    if empty:
        return DecisionSpec(
            kind="force_complete",
            output=decision.output,
            cancel_steps=decision.cancel_steps,
            cancel_sibling_steps=decision.cancel_sibling_steps,
        )
    return DecisionSpec(
        kind="go_to",
        movements=list(decision.movements),
        cancel_steps=decision.cancel_steps,
        cancel_sibling_steps=decision.cancel_sibling_steps,
    )
