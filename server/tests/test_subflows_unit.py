"""SubFlows' pure rules: the child ID, reuse decisions, condition checks and matching."""

from __future__ import annotations

from typing import Literal

import msgspec
import pytest
from dex._protocol import ConditionSpec, FlowSpec, SubFlowStartSpec, WaitSpec
from dex_server.engine import WaitingExecution, match_waits
from dex_server.engine.features import SERVER_FEATURES, SUBFLOWS, missing
from dex_server.engine.subflows import (
    InvalidSubFlowError,
    check_subflows,
    child_flow_id,
    child_request_id,
    reuse_action,
    subflow_positions,
)


def child(run_id: str) -> ConditionSpec:
    return ConditionSpec(kind="subflow", flow_id=f"SubFlow:{run_id}", run_id=run_id)


def timer(at: float) -> ConditionSpec:
    return ConditionSpec(kind="timer", fire_at=at)


def chan(name: str) -> ConditionSpec:
    return ConditionSpec(kind="channel", channel=name)


def one(mode: Literal["all", "any"], *conditions: ConditionSpec) -> list[WaitingExecution]:
    wait = WaitSpec(mode=mode, conditions=list(conditions))
    return [WaitingExecution(execution_id="S-1", wait=wait)]


def test_the_child_id_names_parent_execution_and_index() -> None:
    assert child_flow_id("order-7", "Pay-2", 1) == "SubFlow:order-7-Pay-2-1"
    assert child_request_id("run-a", "Pay-2", 0) != child_request_id("run-b", "Pay-2", 0)


@pytest.mark.parametrize(
    ("policy", "previous", "same", "action"),
    [
        ("attach", None, False, "start"),
        ("attach", "running", False, "attach"),
        ("attach", "failed", False, "attach"),
        ("restart_if_previous_exits_abnormally", None, False, "start"),
        ("restart_if_previous_exits_abnormally", "running", False, "attach"),
        ("restart_if_previous_exits_abnormally", "completed", False, "attach"),
        ("restart_if_previous_exits_abnormally", "failed", False, "start"),
        ("restart_if_previous_exits_abnormally", "canceled", False, "start"),
        ("restart_if_previous_exits_abnormally", "terminated", False, "start"),
        ("always_restart", "completed", False, "start"),
        ("always_restart", "running", False, "restart"),
        ("always_restart", "running", True, "attach"),
        ("always_restart", "failed", True, "attach"),
    ],
)
def test_reuse_actions(policy: str, previous: str | None, same: bool, action: str) -> None:
    assert reuse_action(policy, previous, same_request=same) == action


def test_malformed_subflow_conditions_are_refused() -> None:
    start = SubFlowStartSpec(flow_type="Kid", spec=FlowSpec(flow_type="Kid"))
    check_subflows(WaitSpec(conditions=[ConditionSpec(kind="subflow", subflow=start)]))
    with pytest.raises(InvalidSubFlowError, match="which Flow to start"):
        check_subflows(WaitSpec(conditions=[ConditionSpec(kind="subflow")]))
    with pytest.raises(InvalidSubFlowError, match="the server chooses them"):
        check_subflows(
            WaitSpec(conditions=[ConditionSpec(kind="subflow", subflow=start, run_id="r")])
        )
    w = WaitSpec(conditions=[timer(1.0), ConditionSpec(kind="subflow", subflow=start), chan("c")])
    assert subflow_positions(w) == [1]


def test_all_of_waits_for_every_child() -> None:
    waiting = one("all", child("a"), child("b"))
    assert match_waits(waiting, {}, 0.0, {"a"}) == []
    [m] = match_waits(waiting, {}, 0.0, {"a", "b"})
    assert m.subflows_done == [True, True]


def test_any_of_puts_children_after_timers_and_channels() -> None:
    waiting = one("any", child("a"), chan("c"), timer(5.0))
    [m] = match_waits(waiting, {"c": ["m1"]}, 0.0, {"a"})
    assert m.consumed == [["m1"]] and m.subflows_done == [True]  # the channel won
    [m] = match_waits(waiting, {}, 0.0, {"a"})
    assert m.consumed == [[]] and m.timers_fired == [False] and m.subflows_done == [True]
    [m] = match_waits(waiting, {"c": ["m1"]}, 6.0, set())
    assert m.consumed == [[]] and m.timers_fired == [True] and m.subflows_done == [False]
    assert match_waits(waiting, {}, 0.0, set()) == []


def test_a_combination_with_a_child_waits_for_it_to_end() -> None:
    a = msgspec.structs.replace(child("a"), condition_id="a")
    c = msgspec.structs.replace(chan("c"), condition_id="c")
    t = msgspec.structs.replace(timer(5.0), condition_id="t")
    wait = WaitSpec(mode="any_combination", conditions=[a, c, t], groups=[[0, 1], [2]])
    waiting = [WaitingExecution(execution_id="S-1", wait=wait)]
    assert match_waits(waiting, {"c": ["m1"]}, 0.0, set()) == []  # the child still runs
    [m] = match_waits(waiting, {"c": ["m1"]}, 0.0, {"a"})
    assert m.consumed == [["m1"]] and m.subflows_done == [True]
    [m] = match_waits(waiting, {"c": ["m1"]}, 6.0, set())  # the Timer's combination
    assert m.consumed == [[]] and m.subflows_done == [False]


def test_the_server_runs_subflows() -> None:
    assert SUBFLOWS in SERVER_FEATURES and missing([SUBFLOWS]) == []
