from __future__ import annotations

import pytest
from dex._protocol import (
    MAX_FLOW_ID_BYTES,
    ConditionSpec,
    DecisionSpec,
    ErrorCode,
    ErrorInfo,
    FlowSpec,
    Movement,
    RetryPolicySpec,
    RpcSpec,
    StateDecl,
    StepSpec,
    WaitSpec,
)
from dex_server.engine import (
    InvalidDecisionError,
    InvalidSpecError,
    LiveExecution,
    StateNames,
    UndeclaredStateError,
    WaitingExecution,
    check_attribute_names,
    check_channel_names,
    check_spec,
    decide_retry,
    expired,
    match_waits,
    plan_decision,
    resolve_timers,
    retry_delay,
)
from dex_server.engine.ids import is_uuid7, new_uuid7
from dex_server.service._common import LimitError, Limits, ServiceError
from hypothesis import given
from hypothesis import strategies as st


def chan(name: str, lo: int = 1, hi: int | None = 1) -> ConditionSpec:
    return ConditionSpec(kind="channel", channel=name, min_count=lo, max_count=hi)


def timer(at: float) -> ConditionSpec:
    return ConditionSpec(kind="timer", fire_at=at)


def w(eid: str, mode: str, *conds: ConditionSpec) -> WaitingExecution:
    return WaitingExecution(execution_id=eid, wait=WaitSpec(mode=mode, conditions=list(conds)))  # type: ignore[arg-type]


def test_all_waits_for_every_condition() -> None:
    waits = [w("S-1", "all", chan("a"), chan("b"))]
    assert match_waits(waits, {"a": ["m1"]}, 0.0) == []
    [m] = match_waits(waits, {"a": ["m1"], "b": ["m2"]}, 0.0)
    assert m.consumed == [["m1"], ["m2"]]


def test_all_reserves_minimums_before_maximums() -> None:
    waits = [w("S-1", "all", chan("a", 1, None), chan("a", 2, 2))]
    [m] = match_waits(waits, {"a": ["1", "2", "3", "4"]}, 0.0)
    assert m.consumed == [["1", "4"], ["2", "3"]]


def test_any_prefers_timers_then_declaration_order() -> None:
    waits = [w("S-1", "any", chan("a"), chan("b"), timer(5.0))]
    [m] = match_waits(waits, {"a": [], "b": ["x"]}, 0.0)
    assert m.consumed == [[], ["x"]]
    [m] = match_waits(waits, {"a": ["y"], "b": ["x"]}, 10.0)
    assert m.consumed == [[], []] and m.timers_fired == [True]


def test_messages_go_to_exactly_one_waiter_in_waiting_order() -> None:
    waits = [w("S-1", "all", chan("a")), w("S-2", "all", chan("a"))]
    [m] = match_waits(waits, {"a": ["m1"]}, 0.0)
    assert m.execution_id == "S-1"
    ms = match_waits(waits, {"a": ["m1", "m2"]}, 0.0)
    assert [(x.execution_id, x.consumed) for x in ms] == [("S-1", [["m1"]]), ("S-2", [["m2"]])]


def test_at_most_is_always_ready() -> None:
    [m] = match_waits([w("S-1", "all", chan("a", 0, 3))], {}, 0.0)
    assert m.consumed == [[]]


def test_timers_resolve_relative_to_commit_time() -> None:
    wait = resolve_timers(WaitSpec(conditions=[ConditionSpec(kind="timer", duration_s=2)]), 100.0)
    assert wait.conditions[0].fire_at == 102.0
    assert match_waits([WaitingExecution(execution_id="a", wait=wait)], {}, 101.9) == []
    assert len(match_waits([WaitingExecution(execution_id="a", wait=wait)], {}, 102.0)) == 1


@given(
    st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=6),
    st.integers(min_value=0, max_value=8),
)
def test_consumption_is_exclusive_and_fifo(mins: list[int], n: int) -> None:
    waits = [w(f"S-{i}", "all", chan("a", lo, lo)) for i, lo in enumerate(mins)]
    queue = [f"m{i}" for i in range(n)]
    taken = [mid for m in match_waits(waits, {"a": queue}, 0.0) for g in m.consumed for mid in g]
    assert len(taken) == len(set(taken))
    assert taken == queue[: len(taken)]


def test_retry_backoff_and_limits() -> None:
    p = RetryPolicySpec(
        initial_interval_s=1,
        backoff_coefficient=2,
        maximum_interval_s=5,
        maximum_attempts=4,
        total_duration_s=None,
    )
    assert [retry_delay(p, a) for a in (1, 2, 3, 4)] == [1, 2, 4, 5]
    err = ErrorInfo(error_type="E", message="x")
    assert decide_retry(p, attempt=3, first_attempt_at=0, now=0, error=err).retry
    assert not decide_retry(p, attempt=4, first_attempt_at=0, now=0, error=err).retry
    nr = ErrorInfo(error_type="E", message="x", non_retryable=True)
    assert not decide_retry(p, attempt=1, first_attempt_at=0, now=0, error=nr).retry
    ra = ErrorInfo(error_type="E", message="x", retry_after_s=30)
    assert decide_retry(p, attempt=1, first_attempt_at=0, now=0, error=ra).delay_s == 30
    total = RetryPolicySpec(total_duration_s=10)
    assert not decide_retry(total, attempt=4, first_attempt_at=0, now=5, error=err).retry


def test_timeouts() -> None:
    assert expired(now=10, deadline=10, last_frame_at=9, heartbeat_timeout_s=None) == "method"
    assert expired(now=5, deadline=10, last_frame_at=2, heartbeat_timeout_s=3) == "heartbeat"
    assert expired(now=4, deadline=10, last_frame_at=2, heartbeat_timeout_s=3) is None


CUR = LiveExecution(execution_id="A-1", step_type="A", from_execution_id="__start__")


def test_go_to_numbers_per_type_and_cancels() -> None:
    live = [
        LiveExecution(execution_id="B-1", step_type="B", from_execution_id="__start__"),
        LiveExecution(execution_id="B-2", step_type="B", from_execution_id="X-1"),
    ]
    d = DecisionSpec(
        kind="go_to",
        movements=[Movement(step_type="B"), Movement(step_type="C")],
        cancel_sibling_steps=["B"],
    )
    plan = plan_decision(d, current=CUR, live=live, step_types=frozenset("ABC"), counters={"B": 2})
    assert [n.execution_id for n in plan.new] == ["B-3", "C-1"]
    assert plan.cancel == ["B-1"]
    assert plan.counters == {"B": 3, "C": 1}


def test_unknown_step_type_is_invalid() -> None:
    d = DecisionSpec(kind="go_to", movements=[Movement(step_type="Nope")])
    with pytest.raises(InvalidDecisionError):
        plan_decision(d, current=CUR, live=[], step_types=frozenset("A"), counters={})


def test_close_decisions() -> None:
    f = plan_decision(
        DecisionSpec(kind="force_fail", reason="r"),
        current=CUR,
        live=[],
        step_types=frozenset("A"),
        counters={},
    )
    assert f.close is not None and f.close.status == "failed" and f.close.error_message == "r"
    g = plan_decision(
        DecisionSpec(kind="graceful_complete"),
        current=CUR,
        live=[],
        step_types=frozenset("A"),
        counters={},
    )
    assert g.graceful and g.close is None
    d = plan_decision(
        DecisionSpec(kind="dead_end"), current=CUR, live=[], step_types=frozenset("A"), counters={}
    )
    assert not d.graceful and d.close is None and not d.new


def test_run_ids_are_uuid7_and_nothing_else_is() -> None:
    ids = [new_uuid7() for _ in range(1000)] + [new_uuid7(now_ms=0)]
    assert all(is_uuid7(i) for i in ids)
    for bad in ["", "x", "abc", ids[0].upper(), ids[0][:-1], ids[0] + "0", f" {ids[0]}", "0" * 32]:
        assert not is_uuid7(bad), bad


def test_flow_id_limit_counts_utf8_bytes_and_names_the_limit() -> None:
    limits = Limits(
        blob_threshold_bytes=2048,
        max_value_bytes=1024,
        max_flow_state_bytes=4096,
        max_request_bytes=8192,
        retention_s=60.0,
    )
    assert limits.max_flow_id_bytes == MAX_FLOW_ID_BYTES == 1024
    limits.check_flow_id("f" * 1024)
    limits.check_flow_id("é" * 512)  # 512 characters, 1024 bytes
    with pytest.raises(
        LimitError, match=r"flow_id is 1026 bytes, over the limit max_flow_id_bytes=1024"
    ):
        limits.check_flow_id("é" * 513)  # 513 characters, but 1026 bytes
    with pytest.raises(ServiceError, match="flow_id must not be empty") as empty:
        limits.check_flow_id("")
    assert empty.value.code == ErrorCode.BAD_REQUEST


_SCHEMA = FlowSpec(
    flow_type="F",
    start_step="A",
    steps=[StepSpec(step_type="A")],
    state=[
        StateDecl(name="a", kind="attribute"),
        StateDecl(name="m", kind="attribute_map"),
        StateDecl(name="c", kind="channel"),
        StateDecl(name="cm", kind="channel_map"),
        StateDecl(name="s", kind="stream"),
    ],
)


@pytest.mark.parametrize(
    "spec",
    [
        FlowSpec(flow_type="F", start_step="B", steps=[StepSpec(step_type="A")]),
        FlowSpec(flow_type="F", steps=[StepSpec(step_type="")]),
        FlowSpec(flow_type="F", steps=[StepSpec(step_type="A"), StepSpec(step_type="A")]),
        FlowSpec(flow_type="F", rpcs=[RpcSpec(name="r"), RpcSpec(name="r")]),
        FlowSpec(flow_type="F", state=[StateDecl(name="a/b", kind="attribute")]),
        FlowSpec(
            flow_type="F",
            state=[StateDecl(name="x", kind="attribute"), StateDecl(name="x", kind="channel")],
        ),
        FlowSpec(flow_type=""),
        # a NUL cannot be stored by PostgreSQL: refused on every store alike
        FlowSpec(flow_type="F\x00"),
        FlowSpec(flow_type="F", steps=[StepSpec(step_type="A\x00")]),
        FlowSpec(flow_type="F", rpcs=[RpcSpec(name="r\x00")]),
        FlowSpec(flow_type="F", state=[StateDecl(name="a\x00", kind="attribute")]),
    ],
)
def test_check_spec_refuses_names_that_do_not_hold_together(spec: FlowSpec) -> None:
    with pytest.raises(InvalidSpecError):
        check_spec(spec)


def test_check_spec_accepts_a_sound_spec() -> None:
    check_spec(_SCHEMA)
    check_spec(FlowSpec(flow_type="F", steps=[StepSpec(step_type="A")]))  # RPC-driven


def test_state_names_are_checked_against_the_schema_by_kind() -> None:
    names = StateNames.of(_SCHEMA)
    check_attribute_names(names, ["a", "m/k", "m/a%2Fb"], "x")
    check_channel_names(names, ["c", "cm/k"], "x")
    for bad in ["", "b", "c", "m", "m/", "a/k", "s", "cm/k"]:
        with pytest.raises(UndeclaredStateError):
            check_attribute_names(names, [bad], "x")
    for bad in ["", "a", "cm", "cm/", "m/k", "s"]:
        with pytest.raises(UndeclaredStateError):
            check_channel_names(names, [bad], "x")
