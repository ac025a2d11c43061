"""Waits: the conditions a Step's ``wait_for`` returns, and their wire form."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from dex._protocol import ConditionSpec, WaitSpec

__all__ = ["ChannelCondition", "Condition", "Timer", "TimerCondition", "Wait"]


@dataclass(frozen=True, kw_only=True, slots=True)
class TimerCondition:
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
class ChannelCondition:
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


Condition = TimerCondition | ChannelCondition


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


@dataclass(frozen=True, slots=True)
class Wait:
    """What a ``wait_for`` returns: the conditions that must hold before ``execute`` runs.

    ``Wait.until(c)`` / ``Wait.all_of(*cs)``: every condition ready. ``Wait.any_of(*cs)``:
    the first ready condition in canonical order (Timers, then Channels, each in argument
    order) wins and only it consumes messages. ``Wait.skip_immediately()``: no condition.
    """

    mode: Literal["all", "any", "skip"]
    conditions: tuple[Condition, ...] = ()

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
        return Wait("all", _checked(conditions))

    @staticmethod
    def any_of(*conditions: Condition) -> Wait:
        """Wait until one condition is ready; the canonical first ready one wins.

        Raises:
            ValueError: no condition was given.

        """
        return Wait("any", _checked(conditions))

    @staticmethod
    def skip_immediately() -> Wait:
        """Go to ``execute`` at once."""
        return Wait("skip")

    def to_spec(self) -> WaitSpec:
        """Return the wire form."""
        return WaitSpec(mode=self.mode, conditions=[c.to_spec() for c in self.conditions])


def _checked(conditions: tuple[Condition, ...]) -> tuple[Condition, ...]:
    if not conditions:
        raise ValueError("a Wait needs at least one condition (or use Wait.skip_immediately())")
    for c in conditions:
        if not isinstance(c, TimerCondition | ChannelCondition):
            raise TypeError(f"not a Wait condition: {c!r}")
    return conditions
