"""Pure engine rules of skipped timers, condition combinations and Flow timeouts."""

from __future__ import annotations

import pytest
from dex._protocol import ConditionSpec, WaitSpec
from dex_server.engine.waits import (
    TimerSelectionError,
    WaitingExecution,
    match_waits,
    skip_timer,
)


def _timer(cid: str | None, fire_at: float) -> ConditionSpec:
    return ConditionSpec(kind="timer", condition_id=cid, fire_at=fire_at)


def _chan(name: str, lo: int = 1, hi: int | None = 1, cid: str | None = None) -> ConditionSpec:
    return ConditionSpec(kind="channel", channel=name, min_count=lo, max_count=hi, condition_id=cid)


def test_skip_timer_makes_one_timer_due_now() -> None:
    wait = WaitSpec(
        mode="all", conditions=[_chan("c", 0, 3), _timer("a", 500.0), _timer("b", 900.0)]
    )
    skipped = skip_timer(wait, condition_id=None, condition_index=1, now=10.0)
    assert [c.fire_at for c in skipped.conditions] == [None, 500.0, 10.0]
    # the input is left alone (records are replaced, never mutated)
    assert wait.conditions[2].fire_at == 900.0
    by_id = skip_timer(skipped, condition_id="a", condition_index=None, now=11.0)
    assert [c.fire_at for c in by_id.conditions] == [None, 11.0, 10.0]
    [m] = match_waits([WaitingExecution(execution_id="S-1", wait=by_id)], {"c": ["m"]}, 11.0)
    assert m.timers_fired == [True, True]


@pytest.mark.parametrize(
    ("cid", "index", "fired"),
    [("zzz", None, False), (None, 2, False), (None, -1, False), ("a", None, True), (None, 0, True)],
)
def test_skip_timer_refuses_unknown_and_fired_timers(
    cid: str | None, index: int | None, fired: bool
) -> None:
    wait = WaitSpec(mode="any", conditions=[_timer("a", 5.0), _chan("c"), _timer("b", 900.0)])
    with pytest.raises(TimerSelectionError) as info:
        skip_timer(wait, condition_id=cid, condition_index=index, now=10.0)
    assert info.value.fired is fired
