"""Wait matching: which waiting executions are satisfied, and by which messages.

Rules (pure, two-phase, exclusive):

* Waiting executions are matched in the order they started waiting; a message goes to
  exactly one of them (the first that can take it), FIFO per Channel.
* ``all``: every timer fired and every channel condition can get its ``min_count``.
  Minimums are reserved first (declaration order), then the rest of each queue is handed
  out up to each ``max_count`` in declaration order.
* ``any``: canonical order timers, then channels, each in declaration order; the first
  ready condition wins and only a winning channel condition consumes.
* ``at_most`` (``min_count == 0``) is always ready; ``skip`` is ready at once.
* A SubFlow condition is ready once its child run (``run_id``) is in ``closed``; in
  ``any`` it comes after timers and channels in the canonical order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

import msgspec
from dex._protocol import ConditionSpec, WaitSpec


@dataclass(frozen=True, kw_only=True)
class WaitingExecution:
    """One execution parked on a Wait whose timers carry absolute ``fire_at`` values."""

    execution_id: str
    wait: WaitSpec


@dataclass(frozen=True, kw_only=True)
class WaitMatch:
    """A satisfied Wait: fired timers and the message ids each channel condition takes."""

    execution_id: str
    timers_fired: list[bool] = field(default_factory=list)
    consumed: list[list[str]] = field(default_factory=list)
    channel_names: list[str] = field(default_factory=list)
    subflows_done: list[bool] = field(default_factory=list)


def resolve_timers(wait: WaitSpec, now: float) -> WaitSpec:
    """Return ``wait`` with every timer's ``duration_s`` turned into an absolute ``fire_at``."""
    conditions = []
    for c in wait.conditions:
        if c.kind == "timer" and c.fire_at is None:
            c = msgspec.structs.replace(c, fire_at=now + max(0.0, c.duration_s or 0.0))
        conditions.append(c)
    return msgspec.structs.replace(wait, conditions=conditions)


def next_fire_at(wait: WaitSpec) -> float | None:
    """Earliest absolute timer of ``wait`` (``None`` when it has no timer)."""
    times = [c.fire_at for c in wait.conditions if c.kind == "timer" and c.fire_at is not None]
    return min(times) if times else None


def _timers(wait: WaitSpec) -> list[ConditionSpec]:
    return [c for c in wait.conditions if c.kind == "timer"]


def _channels(wait: WaitSpec) -> list[ConditionSpec]:
    return [c for c in wait.conditions if c.kind == "channel"]


def _fired(c: ConditionSpec, now: float) -> bool:
    return c.fire_at is not None and c.fire_at <= now


def _subflows_done(wait: WaitSpec, closed: Collection[str]) -> list[bool]:
    return [c.run_id in closed for c in wait.conditions if c.kind == "subflow"]


def _match_all(
    wait: WaitSpec,
    available: Mapping[str, list[str]],
    now: float,
    closed: Collection[str] = frozenset(),
) -> list[list[str]] | None:
    if not all(_fired(t, now) for t in _timers(wait)):
        return None
    if not all(_subflows_done(wait, closed)):
        return None
    chans = _channels(wait)
    offset: dict[str, int] = {}
    taken: list[list[str]] = []
    for c in chans:  # phase 1: reserve every minimum
        name = c.channel or ""
        start = offset.get(name, 0)
        queue = available.get(name, [])
        if len(queue) - start < c.min_count:
            return None
        taken.append(list(queue[start : start + c.min_count]))
        offset[name] = start + c.min_count
    for i, c in enumerate(chans):  # phase 2: distribute the rest up to each maximum
        name = c.channel or ""
        start = offset.get(name, 0)
        queue = available.get(name, [])
        room = len(queue) - start
        extra = room if c.max_count is None else min(room, max(0, c.max_count - c.min_count))
        if extra > 0:
            taken[i].extend(queue[start : start + extra])
            offset[name] = start + extra
    return taken


def _match_any(
    wait: WaitSpec,
    available: Mapping[str, list[str]],
    now: float,
    closed: Collection[str] = frozenset(),
) -> list[list[str]] | None:
    chans = _channels(wait)
    if any(_fired(t, now) for t in _timers(wait)):
        return [[] for _ in chans]
    for i, c in enumerate(chans):
        queue = available.get(c.channel or "", [])
        if len(queue) >= c.min_count:
            count = len(queue) if c.max_count is None else min(len(queue), c.max_count)
            taken: list[list[str]] = [[] for _ in chans]
            taken[i] = list(queue[:count])
            return taken
    if any(_subflows_done(wait, closed)):
        return [[] for _ in chans]
    return None


def match_waits(
    waiting: Sequence[WaitingExecution],
    queues: Mapping[str, Sequence[str]],
    now: float,
    closed: Collection[str] = frozenset(),
) -> list[WaitMatch]:
    """Match waiting executions (in waiting order) against pending messages.

    Args:
        waiting: executions in the order they started waiting.
        queues: pending message ids per physical Channel name, oldest first.
        now: current time (unix seconds) for timers.
        closed: run ids of the SubFlow children that have ended.

    Returns:
        One :class:`WaitMatch` per satisfied execution, in waiting order. Messages taken
        by an earlier match are not offered to later ones.

    """
    available: dict[str, list[str]] = {k: list(v) for k, v in queues.items()}
    matches: list[WaitMatch] = []
    for w in waiting:
        if w.wait.mode == "skip":
            taken: list[list[str]] | None = [[] for _ in _channels(w.wait)]
        elif w.wait.mode == "any" and w.wait.conditions:
            taken = _match_any(w.wait, available, now, closed)
        else:
            taken = _match_all(w.wait, available, now, closed)
        if taken is None:
            continue
        chans = _channels(w.wait)
        for c, ids in zip(chans, taken, strict=True):
            if ids:
                gone = set(ids)
                available[c.channel or ""] = [
                    m for m in available.get(c.channel or "", []) if m not in gone
                ]
        matches.append(
            WaitMatch(
                execution_id=w.execution_id,
                timers_fired=[_fired(t, now) for t in _timers(w.wait)],
                consumed=taken,
                channel_names=[c.channel or "" for c in chans],
                subflows_done=_subflows_done(w.wait, closed),
            )
        )
    return matches
