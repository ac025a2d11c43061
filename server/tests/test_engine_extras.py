"""Pure engine rules of skipped timers, condition combinations and Flow timeouts."""

from __future__ import annotations

import msgspec
import pytest
from dex._protocol import (
    ConditionSpec,
    DecisionSpec,
    FlowConfigWire,
    LoadSpec,
    Movement,
    StepOptionsSpec,
    WaitSpec,
    WorkerTargetWire,
)
from dex_server.engine.config import InvalidConfigError, effective_durability, merge_config
from dex_server.engine.decisions import (
    InvalidDecisionError,
    channels_empty,
    resolve_conditional_complete,
)
from dex_server.engine.waits import (
    InvalidWaitError,
    TimerSelectionError,
    WaitingExecution,
    check_wait,
    inline_wait_usable,
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


# --------------------------------------------------------------------------- combinations


def _combo(groups: list[list[int]], *conditions: ConditionSpec) -> WaitSpec:
    return WaitSpec(mode="any_combination", conditions=list(conditions), groups=groups)


def test_first_feasible_combination_wins_and_only_it_consumes() -> None:
    wait = _combo(
        [[0, 1], [2], [3, 0]],
        _chan("a", cid="a"),
        _chan("b", cid="b"),
        _chan("c", cid="c"),
        _timer("t", 50.0),
    )
    only_a = {"a": ["a1"], "c": []}
    assert match_waits([WaitingExecution(execution_id="S-1", wait=wait)], only_a, 0.0) == []
    queues = {"a": ["a1"], "b": ["b1"], "c": ["c1"]}
    [m] = match_waits([WaitingExecution(execution_id="S-1", wait=wait)], queues, 0.0)
    assert m.consumed == [["a1"], ["b1"], []]
    # the second group alone: the first group's message is left queued
    [m] = match_waits(
        [WaitingExecution(execution_id="S-1", wait=wait)], {"a": ["a1"], "c": ["c1"]}, 0.0
    )
    assert m.consumed == [[], [], ["c1"]]
    # the timer's group takes a's message with it once due
    [m] = match_waits([WaitingExecution(execution_id="S-1", wait=wait)], {"a": ["a1"]}, 60.0)
    assert m.consumed == [["a1"], [], []]
    assert m.timers_fired == [True]


def test_a_message_taken_by_one_combination_waiter_is_not_offered_to_the_next() -> None:
    wait = _combo([[0]], _chan("a", cid="a"))
    waits = [WaitingExecution(execution_id=f"S-{i}", wait=wait) for i in (1, 2)]
    [m] = match_waits(waits, {"a": ["m1"]}, 0.0)
    assert m.execution_id == "S-1"


@pytest.mark.parametrize(
    ("wait", "message"),
    [
        (_combo([], _chan("a", cid="a")), "at least one combination"),
        (_combo([[0]], _chan("a")), "condition_id"),
        (_combo([[0], [1]], _chan("a", cid="x"), _chan("b", cid="x")), "condition_id"),
        (_combo([[]], _chan("a", cid="a")), "no condition"),
        (_combo([[0, 3]], _chan("a", cid="a")), "missing"),
        (_combo([[0, 0]], _chan("a", cid="a")), "twice"),
        (WaitSpec(mode="all", conditions=[_chan("a")], groups=[[0]]), "no combinations"),
    ],
)
def test_check_wait_refuses_combinations_that_cannot_run(wait: WaitSpec, message: str) -> None:
    with pytest.raises(InvalidWaitError, match=message):
        check_wait(wait)


# --------------------------------------------------------- force_complete_if_channels_empty


def test_channels_empty_counts_channels_map_instances_and_own_publishes() -> None:
    sizes = {"jobs": 0, "boxes/k1": 0, "other": 3, "boxesque": 2}
    assert channels_empty(sizes, channels=["jobs"], channel_maps=["boxes"])
    assert not channels_empty({**sizes, "boxes/k2": 1}, channels=["jobs"], channel_maps=["boxes"])
    assert not channels_empty(sizes, channels=["jobs", "other"], channel_maps=[])
    assert not channels_empty(sizes, channels=["jobs"], channel_maps=[], publishing=["jobs"])
    assert channels_empty(sizes, channels=[], channel_maps=[])


def test_resolve_conditional_complete() -> None:
    fallback = Movement(step_type="Loop")
    d = DecisionSpec(
        kind="force_complete_if_channels_empty",
        movements=[fallback],
        output=msgspec.Raw(b"7"),
        empty_channels=["jobs"],
        cancel_steps=["X"],
    )
    done = resolve_conditional_complete(d, empty=True)
    assert (done.kind, bytes(done.output or b""), done.cancel_steps) == (
        "force_complete",
        b"7",
        ["X"],
    )
    again = resolve_conditional_complete(d, empty=False)
    assert (again.kind, again.movements, again.cancel_steps) == ("go_to", [fallback], ["X"])
    plain = DecisionSpec(kind="dead_end")
    assert resolve_conditional_complete(plain, empty=True) is plain
    with pytest.raises(InvalidDecisionError, match="exactly one fallback"):
        resolve_conditional_complete(msgspec.structs.replace(d, movements=[]), empty=True)


# --------------------------------------------------------------------------- inline waits


def test_an_inline_wait_stands_only_for_a_stateless_wait_for_marked_inline() -> None:
    inline = StepOptionsSpec(wait_for_inline=True)
    wait = WaitSpec(conditions=[_chan("c"), _timer(None, 5.0)])
    assert inline_wait_usable(inline, wait)
    assert inline_wait_usable(inline, WaitSpec(mode="skip"))
    # not marked: the Worker's Wait is ignored and wait_for is dispatched as usual
    assert not inline_wait_usable(StepOptionsSpec(), wait)
    for state in (
        {"wait_for_locks": ["Total"]},
        {"wait_for_loads": LoadSpec(channels=["c"])},
        {"wait_for_loads": LoadSpec(attribute_map_instances=["m/k"])},
    ):
        marked = msgspec.structs.replace(inline, **state)
        assert not inline_wait_usable(marked, wait)
    # a SubFlow has to be started by a dispatched wait_for's result
    child = ConditionSpec(kind="subflow", flow_id="child")
    assert not inline_wait_usable(inline, WaitSpec(conditions=[child]))
    # a Wait the matcher cannot run is not taken either
    bad = WaitSpec(mode="any_combination", conditions=[_chan("c", cid="a")], groups=[[3]])
    assert not inline_wait_usable(inline, bad)
