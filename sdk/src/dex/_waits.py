"""Waits: the conditions a Step's ``wait_for`` returns, and their wire form."""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

from dex._protocol import ConditionSpec, SubFlowResultWire, WaitSpec
from dex.errors import feature_not_available

if TYPE_CHECKING:
    from dex._client import FlowResult
    from dex._context import Context
    from dex._flow import Flow
    from dex._subflows import SubFlowOptions

__all__ = [
    "ChannelCondition",
    "Condition",
    "ConditionCombination",
    "SubFlow",
    "SubFlowCondition",
    "Timer",
    "TimerCondition",
    "Wait",
    "WaitKind",
]


class Condition:
    """Base class of the conditions a ``Wait`` holds (Timers, Channels, SubFlows).

    Build conditions with their factories (``Timer.by_duration``, ``channel.for_one()``,
    ``SubFlow.run``...); ``condition_id`` optionally names one in the execution's history.
    """

    __slots__ = ()


@dataclass(frozen=True, kw_only=True, slots=True)
class TimerCondition(Condition):
    """A durable Timer condition (``Timer.by_duration`` or ``Timer.at``)."""

    duration_s: float | None = None
    fire_at: float | None = None  # unix seconds
    condition_id: str | None = None

    def to_spec(self) -> ConditionSpec:
        return ConditionSpec(
            kind="timer",
            condition_id=self.condition_id,
            duration_s=self.duration_s,
            fire_at=self.fire_at,
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelCondition(Condition):
    """Wait for messages of one Channel or ChannelMap instance (``channel.for_one()`` ...).

    ``max_count=None`` means "everything queued" (``at_least``).
    """

    name: str  # declared Channel / ChannelMap name
    kind: Literal["channel", "channel_map"]
    channel: str  # physical name
    min_count: int
    max_count: int | None
    condition_id: str | None = None

    def to_spec(self) -> ConditionSpec:
        return ConditionSpec(
            kind="channel",
            condition_id=self.condition_id,
            channel=self.channel,
            min_count=self.min_count,
            max_count=self.max_count,
        )


@dataclass(frozen=True, slots=True)
class SubFlowCondition(Condition):
    """A condition that holds when a child Flow run ends (``SubFlow.run(...)``).

    The server starts the child when it records the Wait; see ``SubFlow``.
    """

    condition_id: str | None = None
    flow: Flow[Any] | None = None
    input: object = None
    options: SubFlowOptions | None = None


@dataclass(frozen=True, slots=True)
class ConditionCombination:
    """A group of conditions that hold together, for ``Wait.any_combination_of``.

    Every condition of a combination needs a ``condition_id``; the same ``condition_id``
    in two combinations is the same condition (it must be the same value).
    """

    conditions: tuple[Condition, ...]

    @staticmethod
    def of(*conditions: Condition) -> ConditionCombination:
        """Return the combination of ``conditions``.

        Raises:
            ValueError: no condition was given.
            TypeError: a value that is not a condition.

        """
        return ConditionCombination(_checked(conditions))


class SubFlow:
    """Factories and readers of SubFlow conditions (a child Flow run awaited by a Step).

    ``Wait.until(SubFlow.run(child_flow, input, SubFlowOptions(...)))`` in ``wait_for``:
    the server starts the child in the commit that records the Wait, with the Flow ID
    ``SubFlow:<parentFlowId>-<stepExecutionId>-<index>`` (``index`` counts the Wait's
    SubFlow conditions from 0), and the condition holds once that child run ends (in any
    status: a failed child does not fail the parent). ``execute`` reads the child with
    ``get_flow_id`` / ``get_condition_results``. The child Flow must be registered (the
    same instance) on the Worker running the parent's ``wait_for``. Ending the parent does
    not cancel a child still running.
    """

    @staticmethod
    def run(flow: Flow[Any], input: object, options: SubFlowOptions | None = None) -> Condition:
        """Return a condition that starts ``flow`` with ``input`` and holds when it ends.

        ``options.reuse_policy`` says what happens when the child ID already has a run
        (default ``RESTART_IF_PREVIOUS_EXITS_ABNORMALLY``: attach to a running or
        completed one, start anew after any other end).
        """
        return SubFlowCondition(
            options.condition_id if options is not None else None, flow, input, options
        )

    @staticmethod
    def get_flow_id(context: Context, index: int = 0) -> str:
        """Return the Flow ID of the ``index``-th SubFlow condition of this Step's Wait.

        Raises:
            IndexError: the Wait had no SubFlow condition ``index`` (or this is not
                ``execute`` after a Wait).

        """
        return _subflow_result(context, index).flow_id

    @staticmethod
    def get_condition_results(context: Context, index: int = 0) -> FlowResult:
        """Return the result of the ``index``-th SubFlow condition of this Step's Wait.

        A child that had not ended when another condition of a ``Wait.any_of`` won reads
        as ``FlowStatus.RUNNING`` (a snapshot at that moment).

        Raises:
            IndexError: the Wait had no SubFlow condition ``index`` (or this is not
                ``execute`` after a Wait).

        """
        from dex._client._types import FlowResult

        inv = context._inv
        return FlowResult.from_wire(_subflow_result(context, index).result, inv.codec)


def _subflow_result(context: Context, index: int) -> SubFlowResultWire:
    results = context._inv.task.condition_results
    got = results.subflows if results is not None else []
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(got):
        raise IndexError(
            f"no SubFlow condition {index!r}: this Step's Wait had {len(got)} (execute only)"
        )
    return got[index]


def channel_bounds(kind: str, lo: int, hi: int | None) -> tuple[int, int | None]:
    """Validate condition bounds; ``ValueError`` names the factory on bad counts."""
    for v in (lo, hi):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise TypeError(f"{kind}: counts must be int, got {v!r}")
    if lo < 0 or (hi is not None and (hi < 1 or hi < lo)):
        raise ValueError(f"{kind}: invalid bounds ({lo}, {hi})")
    return lo, hi


class Timer:
    """Factories of Timer conditions. Timers are durable and hold no Worker while waiting."""

    @staticmethod
    def by_duration(duration: timedelta | float, condition_id: str | None = None) -> TimerCondition:
        """Fire ``duration`` after the ``wait_for`` result commits (sub-second allowed).

        Raises:
            ValueError: the duration is negative or not finite.

        """
        seconds = duration.total_seconds() if isinstance(duration, timedelta) else float(duration)
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"Timer duration must be finite and non-negative, got {duration!r}")
        return TimerCondition(duration_s=seconds, condition_id=condition_id)

    @staticmethod
    def at(deadline: datetime, condition_id: str | None = None) -> TimerCondition:
        """Fire at an absolute time (timezone-aware ``datetime``; past times fire at once).

        Raises:
            ValueError: ``deadline`` is naive (has no timezone).

        """
        if deadline.tzinfo is None or deadline.utcoffset() is None:
            raise ValueError("Timer.at needs a timezone-aware datetime")
        return TimerCondition(fire_at=deadline.timestamp(), condition_id=condition_id)


class WaitKind(enum.StrEnum):
    """How a Wait's conditions combine."""

    SKIP_IMMEDIATELY = "skip_immediately"
    ALL_OF = "all_of"
    ANY_OF = "any_of"
    ANY_COMBINATION_OF = "any_combination_of"


# the wire's names of the kinds; "all" / "any" / "skip" are also accepted as kinds
_WIRE_MODE: dict[WaitKind, Literal["all", "any", "skip"]] = {
    WaitKind.SKIP_IMMEDIATELY: "skip",
    WaitKind.ALL_OF: "all",
    WaitKind.ANY_OF: "any",
}
_MODE_KIND = {mode: kind for kind, mode in _WIRE_MODE.items()}


@dataclass(frozen=True, slots=True)
class Wait:
    """What a ``wait_for`` returns: the conditions that must hold before ``execute`` runs.

    ``Wait.until(c)`` / ``Wait.all_of(*cs)``: every condition ready. ``Wait.any_of(*cs)``:
    the first ready condition in canonical order (Timers, then Channels, then SubFlows,
    each in argument order) wins and only it consumes messages.
    ``Wait.skip_immediately()``: no condition.
    ``Wait.any_combination_of(*combinations)``: the first combination, in declaration
    order, whose conditions are all ready wins; only its Channel conditions consume.
    """

    kind: WaitKind
    conditions: tuple[Condition, ...] = ()
    combinations: tuple[ConditionCombination, ...] = ()

    def __post_init__(self) -> None:
        kind: object = self.kind
        if not isinstance(kind, WaitKind):
            try:
                kind = _MODE_KIND.get(kind) or WaitKind(kind)  # type: ignore[call-overload, arg-type]
            except (ValueError, TypeError):
                raise ValueError(f"not a WaitKind: {self.kind!r}") from None
            object.__setattr__(self, "kind", kind)

    @property
    def mode(self) -> Literal["all", "any", "skip", "any_combination"]:
        """The kind as the wire names it."""
        return _WIRE_MODE.get(self.kind, "any_combination")

    @staticmethod
    def until(condition: Condition) -> Wait:
        """Wait for one condition (same as ``all_of(condition)``)."""
        return Wait.all_of(condition)

    @staticmethod
    def all_of(*conditions: Condition) -> Wait:
        """Wait until every condition is ready.

        Raises:
            ValueError: no condition was given.

        """
        return Wait(WaitKind.ALL_OF, _checked(conditions))

    @staticmethod
    def any_of(*conditions: Condition) -> Wait:
        """Wait until one condition is ready; the canonical first ready one wins.

        Raises:
            ValueError: no condition was given.

        """
        return Wait(WaitKind.ANY_OF, _checked(conditions))

    @staticmethod
    def any_combination_of(*combinations: ConditionCombination) -> Wait:
        """Wait until every condition of one of the ``combinations`` is ready.

        The first combination in declaration order whose conditions are all ready wins;
        only its Channel conditions consume messages (matched as ``all_of`` matches: every
        minimum first, then the rest up to each maximum). ``execute`` reads the consumed
        messages with ``channel.results(context)``; ``context.has_timer_fired(i)``
        counts the distinct Timers in order of first appearance.

        Every condition needs a ``condition_id``, and one ID names one condition. As in
        the original SDK, that is checked when the Wait is sent (``to_spec``: the attempt
        fails and is not retried), not when it is built.

        Raises:
            ValueError: no combination.
            TypeError: a value that is not a ``ConditionCombination``.

        """
        if not combinations:
            raise ValueError("Wait.any_combination_of needs at least one ConditionCombination")
        for combination in combinations:
            if not isinstance(combination, ConditionCombination):
                raise TypeError(f"not a ConditionCombination: {combination!r}")
        return Wait(WaitKind.ANY_COMBINATION_OF, (), tuple(combinations))

    @staticmethod
    def skip_immediately() -> Wait:
        """Go to ``execute`` at once."""
        return Wait(WaitKind.SKIP_IMMEDIATELY)

    def to_spec(
        self, subflow: Callable[[SubFlowCondition], ConditionSpec] | None = None
    ) -> WaitSpec:
        """Return the wire form; ``subflow`` builds a SubFlow condition's (a Worker's part).

        Raises:
            FeatureNotAvailableError: a SubFlow condition without ``subflow``.

        """
        mode = _WIRE_MODE.get(self.kind)
        if mode is None:
            return self._combinations_spec(subflow)
        return WaitSpec(
            mode=mode, conditions=[_condition_spec(c, subflow) for c in self.conditions]
        )

    def _combinations_spec(
        self, subflow: Callable[[SubFlowCondition], ConditionSpec] | None
    ) -> WaitSpec:
        index: dict[str, int] = {}
        by_id: dict[str, Condition] = {}
        specs: list[ConditionSpec] = []
        groups: list[list[int]] = []
        for combination in self.combinations:
            group = []
            for c in combination.conditions:
                cid = getattr(c, "condition_id", None) or ""
                if not cid:
                    raise ValueError(
                        "every condition of Wait.any_combination_of needs a condition_id, "
                        f"got {c!r}"
                    )
                if by_id.setdefault(cid, c) != c:
                    raise ValueError(
                        f"condition_id {cid!r} names two different conditions in "
                        "Wait.any_combination_of"
                    )
                if cid not in index:
                    index[cid] = len(specs)
                    specs.append(_condition_spec(c, subflow))
                group.append(index[cid])
            groups.append(group)
        return WaitSpec(mode="any_combination", conditions=specs, groups=groups)


def _condition_spec(
    c: Condition, subflow: Callable[[SubFlowCondition], ConditionSpec] | None
) -> ConditionSpec:
    if isinstance(c, SubFlowCondition) and subflow is not None:
        return subflow(c)
    if not isinstance(c, TimerCondition | ChannelCondition):
        feature_not_available("SubFlows")
    return c.to_spec()


def _checked(conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
    if not conditions:
        raise ValueError("a Wait needs at least one condition (or use Wait.skip_immediately())")
    for c in conditions:
        if not isinstance(c, Condition):
            raise TypeError(f"not a Wait condition: {c!r}")
    return tuple(conditions)
