"""Pure engine rules of skipped timers, condition combinations and Flow timeouts."""

from __future__ import annotations

import pytest
from dex._protocol import ConditionSpec, FlowConfigWire, WaitSpec, WorkerTargetWire
from dex_server.engine.config import InvalidConfigError, effective_durability, merge_config
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


# --------------------------------------------------------------------------- FlowConfig


def test_merge_config_replaces_the_fields_given_and_keeps_the_rest() -> None:
    start = FlowConfigWire(continue_as_new_threshold=100, attribute_store_names=["a"])
    merged = merge_config(start, FlowConfigWire(step_durability="async"))
    assert merged == FlowConfigWire(
        continue_as_new_threshold=100, attribute_store_names=["a"], step_durability="async"
    )
    # an empty list is a value (it disables the stores), None keeps
    assert (
        merge_config(merged, FlowConfigWire(attribute_store_names=[])).attribute_store_names == []
    )
    assert merge_config(None, FlowConfigWire()) == FlowConfigWire()


@pytest.mark.parametrize(
    ("update", "named"),
    [
        (FlowConfigWire(continue_as_new_threshold=-1), "continue_as_new_threshold"),
        (FlowConfigWire(continue_as_new_page_size_bytes=1 << 70), "page_size_bytes"),
        (FlowConfigWire(worker_target=WorkerTargetWire(address="h:1")), "listening"),
        (FlowConfigWire(worker_target=WorkerTargetWire(headless=True)), "listening"),
        (FlowConfigWire(attribute_store_names=["ok", ""]), "empty name"),
    ],
)
def test_merge_config_refuses_values_no_flow_can_have(update: FlowConfigWire, named: str) -> None:
    with pytest.raises(InvalidConfigError, match=named):
        merge_config(FlowConfigWire(), update)


@pytest.mark.parametrize(
    ("own", "route", "flow", "expected"),
    [
        ("async", True, "sync", "async"),  # the method's own option wins, route or not
        ("sync", False, "async", "sync"),
        ("default", True, "async", "sync"),  # a recovery route keeps it SYNC
        ("default", False, "async", "async"),  # else the Flow's step_durability
        ("default", False, "default", "sync"),  # else SYNC
        ("default", False, None, "sync"),
    ],
)
def test_effective_durability(own: str, route: bool, flow: str | None, expected: str) -> None:
    assert effective_durability(own, has_recovery_route=route, flow_default=flow) == expected
