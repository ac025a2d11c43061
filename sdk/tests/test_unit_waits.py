from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from dex import (
    Channel,
    ChannelCondition,
    ChannelMap,
    Context,
    Step,
    StepDecision,
    StepMovement,
    StepOptions,
    Timer,
    Wait,
)
from dex._decisions import DecisionKind
from dex._protocol import ConditionSpec, WaitSpec

Inbox = Channel("Inbox", str)
Replies = ChannelMap("Replies", int)


def test_timers() -> None:
    assert Timer.by_duration(timedelta(milliseconds=250)).to_spec() == ConditionSpec(
        kind="timer", duration_s=0.25
    )
    assert Timer.by_duration(3, condition_id="t").to_spec() == ConditionSpec(
        kind="timer", duration_s=3.0, condition_id="t"
    )
    when = datetime(2030, 1, 1, tzinfo=UTC)
    assert Timer.at(when).to_spec() == ConditionSpec(kind="timer", fire_at=when.timestamp())
    with pytest.raises(ValueError):
        Timer.by_duration(-1)
    with pytest.raises(ValueError):
        Timer.by_duration(float("nan"))
    with pytest.raises(ValueError):
        Timer.at(datetime(2030, 1, 1))


def test_channel_conditions() -> None:
    def bounds(c: ChannelCondition) -> tuple[str | None, int, int | None]:
        spec = c.to_spec()
        return spec.channel, spec.min_count, spec.max_count

    assert bounds(Inbox.for_one()) == ("Inbox", 1, 1)
    assert bounds(Inbox.for_n(3)) == ("Inbox", 3, 3)
    assert bounds(Inbox.at_least(2)) == ("Inbox", 2, None)
    assert bounds(Inbox.at_most(4)) == ("Inbox", 0, 4)
    assert bounds(Inbox.for_range(1, 5)) == ("Inbox", 1, 5)
    assert bounds(Replies.for_one("a b")) == ("Replies/a%20b", 1, 1)
    assert bounds(Replies.for_n("k", 2)) == ("Replies/k", 2, 2)
    assert bounds(Replies.at_least("k", 1)) == ("Replies/k", 1, None)
    assert bounds(Replies.at_most("k", 1)) == ("Replies/k", 0, 1)
    assert bounds(Replies.for_range("k", 0, 2)) == ("Replies/k", 0, 2)
    with pytest.raises(ValueError):
        Inbox.for_n(0)
    with pytest.raises(ValueError):
        Inbox.for_range(3, 2)
    with pytest.raises(ValueError):
        Inbox.at_most(0)
    with pytest.raises(TypeError):
        Inbox.for_n(1.5)  # type: ignore[arg-type]


def test_wait_combinators() -> None:
    t = Timer.by_duration(1)
    c = Inbox.for_one()
    assert Wait.until(c).to_spec() == WaitSpec(mode="all", conditions=[c.to_spec()])
    assert Wait.all_of(t, c).to_spec().conditions == [t.to_spec(), c.to_spec()]
    assert Wait.any_of(c, t).to_spec() == WaitSpec(
        mode="any", conditions=[c.to_spec(), t.to_spec()]
    )
    assert Wait.skip_immediately().to_spec() == WaitSpec(mode="skip")
    with pytest.raises(ValueError):
        Wait.any_of()
    with pytest.raises(TypeError):
        Wait.all_of("x")  # type: ignore[arg-type]


def test_decision_builders() -> None:
    class A(Step[int]):
        def execute(self, context: Context, input: int) -> StepDecision:
            return StepDecision.dead_end()

    d = StepDecision.go_to(A, 1)
    assert d.kind is DecisionKind.NEXT and d.movements == (StepMovement(A, 1),)
    opts = StepOptions(heartbeat_timeout=5)
    many = StepDecision.go_to_many(StepMovement.of(A, 1), StepMovement.of(A, 2, options=opts))
    assert [m.input for m in many.movements] == [1, 2] and many.movements[1].options is opts
    with pytest.raises(TypeError):
        StepDecision.go_to_many(A)  # type: ignore[arg-type]
    assert StepDecision.graceful_complete("x").output == "x"
    assert StepDecision.force_complete().output is None
    assert StepDecision.force_fail("why").reason == "why"
    dead = StepDecision.dead_end().with_canceling_steps(A).with_canceling_sibling_steps(A)
    assert dead.cancel_steps == (A,) and dead.cancel_sibling_steps == (A,)
