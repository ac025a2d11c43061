"""Wait matching: which waiting executions are satisfied, and by which messages.

Rules (pure, two-phase, exclusive):

* Waiting executions are matched in the order they started waiting; a message goes to
  exactly one of them (the first that can take it), FIFO per Channel.
* ``all``: every timer fired and every channel condition can get its ``min_count``.
  Minimums are reserved first (declaration order), then the rest of each queue is handed
  out up to each ``max_count`` in declaration order.
* ``any``: canonical order timers, then channels, each in declaration order; the first
  ready condition wins and only a winning channel condition consumes.
* ``any_combination``: the first group (declaration order) whose conditions are all
  ready, matched as ``all``; only that group's channel conditions consume.
* ``at_most`` (``min_count == 0``) is always ready; ``skip`` is ready at once.
* A SubFlow condition is ready once its child run (``run_id``) is in ``closed``; in
  ``any`` it comes after timers and channels in the canonical order.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import msgspec
from dex._protocol import ConditionSpec, LoadSpec, StepOptionsSpec, WaitSpec


class WaitingExecution(msgspec.Struct, frozen=True, kw_only=True):
    """One execution parked on a Wait whose timers carry absolute ``fire_at`` values."""

    execution_id: str
    wait: WaitSpec


class WaitMatch(msgspec.Struct, frozen=True, kw_only=True):
    """A satisfied Wait: fired timers and the message ids each channel condition takes."""

    execution_id: str
    timers_fired: list[bool] = []
    consumed: list[list[str]] = []
    channel_names: list[str] = []
    subflows_done: list[bool] = []


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


def _match_combination(
    wait: WaitSpec,
    available: Mapping[str, list[str]],
    now: float,
    closed: Collection[str] = frozenset(),
) -> list[list[str]] | None:
    chans = [i for i, c in enumerate(wait.conditions) if c.kind == "channel"]
    for group in wait.groups:
        sub = WaitSpec(mode="all", conditions=[wait.conditions[i] for i in group])
        taken = _match_all(sub, available, now, closed)
        if taken is None:
            continue
        # the group's channel conditions, in its order, back to the Wait's positions
        positions = [i for i in group if wait.conditions[i].kind == "channel"]
        by_position = dict(zip(positions, taken, strict=True))
        return [by_position.get(i, []) for i in chans]
    return None


def check_wait(wait: WaitSpec) -> None:
    """Refuse a Wait the matcher cannot run.

    Raises:
        InvalidWaitError: ``any_combination`` without groups, an empty group, an index
            out of range, a condition without (or with a repeated) ``condition_id``; or
            groups given to another mode.

    """
    if wait.mode != "any_combination":
        if wait.groups:
            raise InvalidWaitError(f"a Wait of mode {wait.mode!r} has no combinations")
        return
    if not wait.groups:
        raise InvalidWaitError("Wait.any_combination_of needs at least one combination")
    ids = [c.condition_id for c in wait.conditions]
    if any(not i for i in ids) or len(set(ids)) != len(ids):
        raise InvalidWaitError(
            "every condition of Wait.any_combination_of needs its own condition_id"
        )
    for group in wait.groups:
        if not group or any(not 0 <= i < len(wait.conditions) for i in group):
            raise InvalidWaitError(f"a combination names no condition or a missing one: {group}")
        if len(set(group)) != len(group):
            raise InvalidWaitError(f"a combination names a condition twice: {group}")


def inline_wait_usable(options: StepOptionsSpec, wait: WaitSpec) -> bool:
    """Whether a movement's inline ``wait_for`` result may stand for a dispatched one.

    Only for a Step whose options say ``wait_for_inline``, whose ``wait_for`` holds no locks
    and loads nothing, and whose Wait starts no SubFlow and is one the matcher can run;
    otherwise the ``wait_for`` is dispatched as usual.
    """
    if not options.wait_for_inline or options.wait_for_locks:
        return False
    if options.wait_for_loads != LoadSpec():
        return False
    if any(c.kind == "subflow" for c in wait.conditions):
        return False
    try:
        check_wait(wait)
    except InvalidWaitError:
        return False
    return True


class InvalidWaitError(ValueError):
    """A ``wait_for`` result that no Wait can be; the message says why."""


def channel_demand(waiting: Sequence[WaitingExecution]) -> dict[str, int | None]:
    """The most pending ids per Channel that :func:`match_waits` can use for ``waiting``.

    Each channel condition takes at most ``max(min_count, max_count)`` messages and the
    matcher hands them out FIFO, so across every Wait it never looks past the sum of those
    on a Channel: the first that many ids give the same matches as the whole queue. ``None``
    means unbounded (a condition without ``max_count``). Used to read a bounded prefix of a
    long backlog rather than all of it on each match.
    """
    out: dict[str, int | None] = {}
    for w in waiting:
        if w.wait.mode == "skip":
            continue
        for c in _channels(w.wait):
            name = c.channel or ""
            if name in out and out[name] is None:
                continue
            if c.max_count is None:
                out[name] = None
            else:
                out[name] = (out.get(name) or 0) + max(c.min_count, c.max_count)
    return out


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
        elif w.wait.mode == "any_combination":
            taken = _match_combination(w.wait, available, now, closed)
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


class TimerSelectionError(ValueError):
    """``skip_timer`` named no timer of the Wait (``fired`` False) or a fired one (True)."""

    def __init__(self, message: str, *, fired: bool) -> None:
        super().__init__(message)
        self.fired = fired


def skip_timer(
    wait: WaitSpec, *, condition_id: str | None, condition_index: int | None, now: float
) -> WaitSpec:
    """Return ``wait`` with one pending timer made due at ``now`` (it fires now).

    The timer is selected by its ``condition_id`` or by its zero-based position among the
    Wait's timers (other condition kinds are not counted).

    Raises:
        TimerSelectionError: no such timer (``fired`` False), or it is no longer pending:
            it fired or was skipped before (``fired`` True).

    """
    timers = [i for i, c in enumerate(wait.conditions) if c.kind == "timer"]
    if condition_id is not None:
        hits = [i for i in timers if wait.conditions[i].condition_id == condition_id]
        what = f"condition_id {condition_id!r}"
    else:
        k = -1 if condition_index is None else condition_index
        hits = [timers[k]] if 0 <= k < len(timers) else []
        what = f"index {condition_index} (the Wait has {len(timers)} timer(s))"
    if not hits:
        raise TimerSelectionError(f"the Wait has no timer with {what}", fired=False)
    at = hits[0]
    c = wait.conditions[at]
    if _fired(c, now):
        raise TimerSelectionError(f"the timer with {what} is no longer pending", fired=True)
    conditions = list(wait.conditions)
    conditions[at] = msgspec.structs.replace(c, fire_at=now)
    return msgspec.structs.replace(wait, conditions=conditions)
