"""Fork planning (``engine/forks.py``) on recorded histories, without a server."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from dex_server.engine import history as hist
from dex_server.engine.forks import ForkPointError, HistoryRow, plan_fork

pytestmark = pytest.mark.store_independent  # no store: the PostgreSQL run skips it

_enc = msgspec.json.Encoder()
STEPS = frozenset({"Begin", "Pay", "Wait", "Side"})


def _raw(v: Any) -> msgspec.Raw:
    return msgspec.Raw(_enc.encode(v))


class History:
    def __init__(self) -> None:
        self.rows: list[HistoryRow] = []

    def add(self, type_: str, payload: bytes) -> int:
        eid = len(self.rows) + 1
        self.rows.append((eid, float(eid), type_, payload))
        return eid

    def started(self, start: str = "Begin", **attrs: Any) -> None:
        self.add(
            hist.FLOW_STARTED,
            hist.flow_started(
                flow_type="F",
                start_step_type=start,
                input=_raw(1),
                initial_attributes={k: _raw(v) for k, v in attrs.items()},
                request_id="",
            ),
        )

    def step(
        self, type_: str, eid: str, output: dict[str, Any], inp: dict[str, Any] | None = None
    ) -> int:
        payload = hist.step_event(
            step_type=eid.rsplit("-", 1)[0],
            execution_id=eid,
            from_execution_id="x",
            final_attempt=1,
            started_time=0.0,
            duration=0.0,
            input=inp or {},
            output=output,
        )
        return self.add(type_, payload)

    def execute(self, eid: str, decision: dict[str, Any], **extra: Any) -> int:
        cr = extra.pop("condition_results", None)
        return self.step(
            hist.STEP_EXECUTE_COMPLETED,
            eid,
            {"decision": decision, **extra},
            {"conditionResults": cr} if cr else None,
        )

    def rpc(self, name: str, **output: Any) -> int:
        return self.add(
            hist.RPC_EXECUTION_COMPLETED,
            hist.rpc_completed(rpc_name=name, input=None, output=output),
        )


def _go(step: str, value: Any = None) -> dict[str, Any]:
    return {"kind": "go_to", "movements": [{"step_type": step, "input": value}]}


def _order() -> History:
    """Begin → Pay (single attempt) → Wait (one message of ``inbox``); an RPC sends it."""
    h = History()
    h.started(note="n0")
    h.execute("Begin-1", _go("Pay", 5), attributeWrites={"trail": ["begin"]})
    h.execute("Pay-1", _go("Wait"), attributeWrites={"paid": 5})
    wait = {"mode": "all", "conditions": [{"kind": "channel", "channel": "inbox"}]}
    h.step(hist.STEP_WAIT_FOR_COMPLETED, "Wait-1", {"wait": wait})
    h.rpc("send", publishes=[{"channel": "inbox", "value": "hi"}], attributeWrites={"note": "hi"})
    h.execute(
        "Wait-1",
        {"kind": "graceful_complete", "output": "hi"},
        condition_results={"channel_values": [["hi"]], "channel_names": ["inbox"]},
    )
    return h


def _single(step_type: str) -> bool:
    return step_type == "Pay"


def test_beginning_keeps_the_start_and_takes_the_single_attempt_outcome() -> None:
    plan = plan_fork(_order().rows, "beginning", step_types=STEPS, single_attempt=_single)
    assert plan.cut_event_id == 2
    assert list(plan.executions) == ["Begin-1"] and plan.counters == {"Begin": 1}
    assert plan.attributes == {"note": b'"n0"'}
    assert list(plan.recorded) == ["Pay-1"] and plan.rerun == []
    assert [(r.rpc_name, r.publishes) for r in plan.reapplied] == [("send", [("inbox", b'"hi"')])]


def test_rerun_and_skip_writes_reapply() -> None:
    plan = plan_fork(
        _order().rows,
        "beginning",
        step_types=STEPS,
        single_attempt=_single,
        skip_writes_reapply=True,
        rerun_single_attempt=True,
    )
    assert plan.recorded == {} and plan.rerun == ["Pay-1"] and plan.reapplied == []


def test_wait_for_fork_point_has_the_message_pending_only_through_reapply() -> None:
    plan = plan_fork(
        _order().rows,
        "step_execution_id",
        step_types=STEPS,
        single_attempt=_single,
        execution_id="Wait-1",
    )
    assert plan.method == "wait_for" and plan.cut_event_id == 4
    assert plan.executions["Wait-1"].phase == "start"
    assert plan.attributes["paid"] == b"5" and plan.channels == {}
    assert plan.recorded == {} and len(plan.reapplied) == 1


def test_execute_fork_point_keeps_the_condition_results_and_consumes_them() -> None:
    plan = plan_fork(
        _order().rows,
        "step_type",
        step_types=STEPS,
        single_attempt=_single,
        step_type="Wait",
        method="execute",
    )
    x = plan.executions["Wait-1"]
    assert x.phase == "execute" and x.condition_results is not None
    assert [bytes(v) for v in x.condition_results.channel_values[0]] == [b'"hi"']
    assert plan.channels == {"inbox": []}  # the message is its, not pending again
    assert plan.reapplied == []  # the RPC is before the cut: part of the state
    assert plan.attributes["note"] == b'"hi"'


def test_a_waiting_execution_at_a_time_cut_waits_again_with_its_messages() -> None:
    h = _order()
    plan = plan_fork(
        h.rows, "history_event_time", step_types=STEPS, single_attempt=_single, event_time=5.0
    )
    assert plan.cut_event_id == 6
    x = plan.executions["Wait-1"]
    assert x.phase == "waiting" and x.wait is not None
    assert plan.channels == {"inbox": [b'"hi"']}  # consumed only at Wait-1's execute commit
    after = plan_fork(
        h.rows, "history_event_time", step_types=STEPS, single_attempt=_single, event_time=99.0
    )
    assert after.executions == {} and after.closing and after.channels == {"inbox": []}
    assert after.completions == [("Wait", "Wait-1", b'"hi"')]


def test_cancellations_and_rpc_movements_are_replayed() -> None:
    h = History()
    h.started()
    h.execute(
        "Begin-1",
        {"kind": "go_to", "movements": [{"step_type": "Side"}, {"step_type": "Wait"}]},
    )
    h.rpc("more", movements=[{"stepType": "Side", "input": 2}])
    h.execute("Wait-1", {"kind": "dead_end", "cancel_steps": ["Side"]})
    plan = plan_fork(
        h.rows, "history_event_time", step_types=STEPS, single_attempt=_single, event_time=9.0
    )
    assert plan.executions == {} and plan.counters == {"Begin": 1, "Side": 2, "Wait": 1}
    mid = plan_fork(
        h.rows, "history_event_time", step_types=STEPS, single_attempt=_single, event_time=3.0
    )
    assert sorted(mid.executions) == ["Side-1", "Side-2", "Wait-1"]
    assert mid.executions["Side-2"].from_execution_id == "__rpc/more"


@pytest.mark.parametrize(
    ("kind", "fields", "message"),
    [
        ("step_execution_id", {}, "needs step_execution_id"),
        ("step_execution_id", {"execution_id": "Nope-1"}, "no event of Step execution"),
        ("step_type", {}, "needs step_type"),
        ("step_type", {"step_type": "Nope"}, "no execution of Step type"),
        ("history_event_time", {}, "needs history_event_time"),
    ],
)
def test_fork_points_that_name_nothing_are_refused(
    kind: Any, fields: dict[str, Any], message: str
) -> None:
    with pytest.raises(ForkPointError, match=message):
        plan_fork(_order().rows, kind, step_types=STEPS, single_attempt=_single, **fields)


def test_execute_of_an_execution_that_never_executed_is_refused() -> None:
    h = _order()
    rows = h.rows[:-1]  # Wait-1 never executed
    with pytest.raises(ForkPointError, match="no committed execute"):
        plan_fork(
            rows,
            "step_execution_id",
            step_types=STEPS,
            single_attempt=_single,
            execution_id="Wait-1",
            method="execute",
        )


def test_a_history_may_start_from_the_state_a_continue_as_new_carried() -> None:
    from dex_server.engine.forks import FLOW_CONTINUED

    wait = {"mode": "all", "conditions": [{"kind": "channel", "channel": "inbox"}]}
    h = History()
    h.add(
        FLOW_CONTINUED,
        _enc.encode(
            {
                "previousRunId": "gone",
                "continuedStart": {
                    "attributes": {"paid": 5},
                    "pendingChannelMessages": [{"channel": "inbox", "value": "early"}],
                    "stepsToResume": [
                        {
                            "stepExecutionId": "Wait-3",
                            "stepType": "Wait",
                            "fromStepExecutionId": "Pay-1",
                            "input": 7,
                            "wait": wait,
                            "locals": {"k": 1},
                        }
                    ],
                    "counters": {"Wait": 3, "Pay": 1},
                },
            }
        ),
    )
    h.execute(
        "Wait-3",
        _go("Pay"),
        condition_results={"channel_values": [["early"]], "channel_names": ["inbox"]},
    )
    plan = plan_fork(h.rows, "beginning", step_types=STEPS, single_attempt=_single)
    x = plan.executions["Wait-3"]
    assert (x.phase, x.input, x.locals) == ("waiting", b"7", {"k": b"1"})
    assert plan.channels == {"inbox": [b'"early"']} and plan.attributes == {"paid": b"5"}
    assert plan.counters == {"Wait": 3, "Pay": 1}
    at_end = plan_fork(
        h.rows, "history_event_time", step_types=STEPS, single_attempt=_single, event_time=9.0
    )
    assert list(at_end.executions) == ["Pay-2"] and at_end.channels == {"inbox": []}
