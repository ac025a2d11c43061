"""The flow-definition API's call shapes: decision functions, positional constructors,
generic classes, None as "unset", and the named parts of the model that are not run yet."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import dex
import pytest
from dex import (
    Attribute,
    AttributeMap,
    Channel,
    ChannelMap,
    ConditionCombination,
    Context,
    Flow,
    PersistenceSchema,
    RecoveryErrorInfo,
    Registry,
    RetryPolicy,
    RPCResult,
    Step,
    StepDecision,
    StepDurability,
    StepList,
    StepMovement,
    StepOptions,
    StepOutput,
    Stream,
    SubFlow,
    SubFlowOptions,
    SubFlowReusePolicy,
    Timer,
    Wait,
    WaitForFailurePolicy,
    heartbeat,
    rpc,
)
from dex._decisions import DecisionKind
from dex._invoke import invoke
from dex._protocol import ConditionSpec, RetryPolicySpec
from dex._spec import flow_spec
from dex._waits import Condition, SubFlowCondition, WaitKind
from dex.errors import FeatureNotAvailableError, FlowDefinitionError, InvalidStepResultError

from .unit_support import RecordingIO, task

Inbox = Channel("Inbox", str)
Boxes = ChannelMap("Boxes", str)
Count = Attribute("Count", int)
Scores = AttributeMap("Scores", int)
Log = Stream("Log", str)


class Next(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return dex.dead_end()


class Drain(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return dex.force_complete_if_channels_empty("done", StepMovement.of(Next, input), Inbox)


class Combined(Step[int]):
    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.any_combination_of(ConditionCombination.of(Inbox.for_one(condition_id="in")))

    def execute(self, context: Context, input: int) -> StepDecision:
        return dex.dead_end()


class Child(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Next())


class AwaitsChild(Step[int]):
    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(SubFlow.run(Child(), input))

    def execute(self, context: Context, input: int) -> StepDecision:
        return dex.dead_end()


class Demo(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList[int].start_step(Drain()).other_steps(Next(), Combined(), AwaitsChild())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Inbox)

    @rpc(timeout=None)
    def ping(self, context: Context) -> RPCResult[str]:
        return RPCResult("pong").with_canceling_steps(Next)


def test_module_decision_functions_build_the_same_decisions_as_the_factories() -> None:
    assert dex.go_to(Next, 1) == StepDecision.go_to(Next, 1)
    assert dex.go_to(Next, 1).kind is DecisionKind.NEXT
    assert dex.go_to_many(StepMovement.of(Next, 1)).movements == (StepMovement(Next, 1),)
    assert dex.graceful_complete("x") == StepDecision(DecisionKind.GRACEFUL_COMPLETE, (), "x")
    assert dex.force_complete("x").kind is DecisionKind.FORCE_COMPLETE
    assert dex.force_fail("why") == StepDecision(DecisionKind.FORCE_FAIL, (), None, "why")
    assert dex.dead_end().kind is DecisionKind.DEAD_END
    with pytest.raises(InvalidStepResultError):
        dex.go_to_many()


def test_step_decision_fields_are_positional_in_the_models_order() -> None:
    fallback = StepMovement.of(Next, 2)
    d = StepDecision(
        "force_complete_if_channels_empty",  # type: ignore[arg-type]
        (),
        "out",
        "",
        (Inbox,),
        fallback,
        (Next,),
    )
    assert d.kind is DecisionKind.FORCE_COMPLETE_IF_CHANNELS_EMPTY
    assert d.empty_channels == (Inbox,) and d.fallback is fallback
    assert d.canceling_steps == (Next,) and d.canceling_sibling_steps == ()
    assert d.reason == "" and StepDecision(DecisionKind.DEAD_END).reason == ""
    built = dex.force_complete_if_channels_empty("out", fallback, Inbox, Boxes)
    assert built.empty_channels == (Inbox, Boxes) and built.output == "out"
    with pytest.raises(TypeError):
        dex.force_complete_if_channels_empty("out", Next, Inbox)  # type: ignore[arg-type]
    # the earlier spelling of NEXT still reads as NEXT
    assert StepDecision("go_to", (fallback,)).kind is DecisionKind.NEXT  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="DecisionKind"):
        StepDecision("jump")  # type: ignore[arg-type]


def test_canceling_steps_and_their_short_names() -> None:
    d = dex.dead_end().with_canceling_steps(Next).with_canceling_sibling_steps(Drain)
    assert d.canceling_steps == (Next,) and d.cancel_steps == (Next,)
    assert d.canceling_sibling_steps == (Drain,) and d.cancel_sibling_steps == (Drain,)
    r = RPCResult("out").with_canceling_steps(Next).with_canceling_steps(Drain)
    assert r.output == "out" and r.canceling_steps == (Next, Drain)


def test_step_list_and_step_movement_are_generic() -> None:
    assert StepMovement[int].of(Next, 1) == StepMovement(Next, 1)
    steps = StepList[int].start_step(Drain).other_steps(Next)
    definitions = list(steps)
    assert [d.is_start_step for d in definitions] == [True, False]
    assert isinstance(definitions[0].step, Drain) and steps.start is definitions[0].step
    assert list(StepList[int].without_start_step(Next))[0].is_start_step is False
    assert StepList[int].empty() == StepList(())


def test_a_step_list_with_two_start_steps_is_refused() -> None:
    class Twice(Flow[int]):
        def get_steps(self) -> StepList[int]:
            first = StepList.start_step(Next())
            return StepList(first._definitions + StepList.start_step(Drain())._definitions)

    with pytest.raises(FlowDefinitionError, match="start Step"):
        Registry([Twice()])


def test_persistence_schema_groups() -> None:
    schema = PersistenceSchema.of(Inbox, Count, Log, [Scores, Boxes])
    assert schema.attributes == (Count, Scores)
    assert schema.channels == (Inbox, Boxes)
    assert schema.streams == (Log,)
    assert schema.declarations == (Count, Scores, Inbox, Boxes, Log)
    assert PersistenceSchema((Count,), [Inbox], ()).channels == (Inbox,)  # type: ignore[arg-type]
    assert PersistenceSchema() == PersistenceSchema.of()
    with pytest.raises(FlowDefinitionError, match="cannot hold"):
        PersistenceSchema(channels=(Count,))  # type: ignore[arg-type]
    with pytest.raises(FlowDefinitionError, match="twice"):
        PersistenceSchema((Attribute("Inbox", int),), (Inbox,))


def test_retry_policy_is_positional_and_zero_means_the_default() -> None:
    p = RetryPolicy(timedelta(seconds=1), 2.0, timedelta(seconds=10), 3)
    assert (p.initial_interval, p.backoff_coefficient, p.maximum_interval) == (
        timedelta(seconds=1),
        2.0,
        timedelta(seconds=10),
    )
    assert p.maximum_attempts == 3 and p.total_duration is None
    unset = RetryPolicy()
    assert (unset.initial_interval, unset.backoff_coefficient, unset.maximum_attempts) == (
        None,
        0.0,
        0,
    )
    from dex._spec import retry_spec

    assert retry_spec(unset) == RetryPolicySpec() == retry_spec(None)


def test_step_options_are_positional_and_none_means_unset() -> None:
    retry = RetryPolicy(maximum_attempts=2)
    o = StepOptions(timedelta(seconds=30), timedelta(seconds=60), None, retry)
    assert o.wait_for_method_timeout == timedelta(seconds=30)
    assert o.execute_method_timeout == timedelta(seconds=60)
    assert o.wait_for_retry is retry and o.execute_retry is None
    assert o.wait_for_failure is WaitForFailurePolicy.FAIL_FLOW
    assert o.execute_durability is StepDurability.DEFAULT
    with pytest.raises(TypeError):  # our additions are keyword-only
        StepOptions(*([None] * 5), WaitForFailurePolicy.PROCEED, *([()] * 14), Next)  # type: ignore[arg-type, call-arg]

    class Unset(Step[int]):
        def get_step_options(self) -> StepOptions:
            return StepOptions(
                wait_for_method_timeout=None,
                execute_method_timeout=None,
                wait_for_retry=None,
                execute_retry=None,
            )

        def execute(self, context: Context, input: int) -> StepDecision:
            return dex.dead_end()

    class UnsetFlow(Flow[int]):
        def get_steps(self) -> StepList[int]:
            return StepList.start_step(Unset())

    spec = flow_spec(UnsetFlow()).steps[0].options
    assert spec.wait_for_timeout_s == spec.execute_timeout_s == 7200.0
    assert spec.wait_for_retry == spec.execute_retry == RetryPolicySpec()


def test_rpc_takes_handler_by_keyword_and_none_as_the_default_timeout() -> None:
    def fn(self: Any, context: Context) -> None:
        return None

    assert rpc(handler=fn) is fn
    assert rpc(timeout=None)(fn) is fn
    specs = {r.name: r for r in flow_spec(Demo()).rpcs}
    assert specs["ping"].timeout_s == 60.0

    class Timed(Flow[None]):
        @rpc(timeout=timedelta(seconds=5))
        def five(self, context: Context) -> None:
            return None

    assert flow_spec(Timed()).rpcs[0].timeout_s == 5.0


def test_registry_flows_codecs_and_physical_names() -> None:
    demo = Demo()
    reg = Registry([demo])
    assert reg.flows == (demo,)
    assert isinstance(reg.codec_registry, dex.CodecRegistry)
    custom = dex.CodecRegistry()
    assert Registry([Demo()], custom).codec_registry is custom
    assert Registry.physical_name("Scores", "a b") == "Scores/a%20b"
    assert Registry.physical_name("Scores", "k") == Scores.load("k").physical


def test_wait_kinds_and_combinations() -> None:
    assert Wait.all_of(Inbox.for_one()).kind is WaitKind.ALL_OF
    assert Wait.any_of(Inbox.for_one()).kind is WaitKind.ANY_OF
    assert Wait.skip_immediately() == Wait(WaitKind.SKIP_IMMEDIATELY)
    wire_spelling: Any = "all"
    assert Wait(wire_spelling, (Inbox.for_one(),)).kind is WaitKind.ALL_OF
    combo = ConditionCombination.of(
        Inbox.for_one(condition_id="in"), Timer.by_duration(1, condition_id="t")
    )
    other = ConditionCombination.of(Timer.by_duration(1, condition_id="t"))
    w = Wait.any_combination_of(combo, other)
    assert w.kind is WaitKind.ANY_COMBINATION_OF and w.combinations == (combo, other)
    assert isinstance(combo.conditions[1], Condition)
    spec = w.to_spec()
    # each distinct condition once; the groups point at them
    assert spec.mode == "any_combination" and spec.groups == [[0, 1], [1]]
    assert [c.condition_id for c in spec.conditions] == ["in", "t"]
    with pytest.raises(ValueError):
        Wait.any_combination_of()
    # built as the original builds them; refused when sent
    unnamed = Wait.any_combination_of(ConditionCombination.of(Inbox.for_one()))
    with pytest.raises(ValueError, match="needs a condition_id"):
        unnamed.to_spec()
    twice = Wait.any_combination_of(
        ConditionCombination.of(Inbox.for_one(condition_id="x")),
        ConditionCombination.of(Timer.by_duration(2, condition_id="x")),
    )
    with pytest.raises(ValueError, match="two different conditions"):
        twice.to_spec()
    with pytest.raises(ValueError):
        ConditionCombination.of()


def test_subflow_conditions_need_a_worker_to_build_their_wire_form() -> None:
    opts = SubFlowOptions(timeout=timedelta(minutes=1), condition_id="child")
    assert opts.reuse_policy is SubFlowReusePolicy.RESTART_IF_PREVIOUS_EXITS_ABNORMALLY
    assert opts.with_attribute(Count, 3)._attribute_initializations == ((Count, (3,)),)
    cond = SubFlow.run(Child(), 1, opts)
    assert isinstance(cond, SubFlowCondition) and cond.condition_id == "child"
    with pytest.raises(FeatureNotAvailableError, match="SubFlows"):
        Wait.until(cond).to_spec()


def test_a_subflow_condition_in_a_combination_is_built_by_the_workers_builder() -> None:
    kid = SubFlow.run(Child(), 1, SubFlowOptions(condition_id="kid"))
    wait = Wait.any_combination_of(
        ConditionCombination.of(kid, Inbox.for_one(condition_id="in")),
        ConditionCombination.of(Timer.by_duration(2, condition_id="t")),
    )
    spec = wait.to_spec(lambda c: ConditionSpec(kind="subflow", condition_id=c.condition_id))
    assert [c.kind for c in spec.conditions] == ["subflow", "channel", "timer"]
    assert spec.groups == [[0, 1], [2]]
    with pytest.raises(FeatureNotAvailableError, match="SubFlows"):
        wait.to_spec()


def test_a_subflow_condition_reaches_the_wire() -> None:
    res = asyncio.run(
        invoke(Registry([Demo()]), task("wait_for", "AwaitsChild", input=1), RecordingIO())
    )
    assert res.error is None and res.wait is not None
    (cond,) = res.wait.conditions
    assert cond.kind == "subflow" and cond.subflow is not None
    assert cond.subflow.flow_type == "Child" and cond.subflow.requires == []


def test_combinations_and_conditional_completion_reach_the_wire() -> None:
    reg = Registry([Demo()])
    res = asyncio.run(invoke(reg, task("wait_for", "Combined", input=1), RecordingIO()))
    assert res.error is None and res.wait is not None
    assert res.wait.mode == "any_combination" and res.wait.groups == [[0]]
    res = asyncio.run(invoke(reg, task("execute", "Drain", input=1), RecordingIO()))
    assert res.error is None and res.decision is not None
    d = res.decision
    assert d.kind == "force_complete_if_channels_empty"
    assert d.empty_channels == [Inbox.name] and [m.step_type for m in d.movements] == ["Next"]


def test_handle_timeout_is_overridable_and_not_run_yet() -> None:
    with pytest.raises(NotImplementedError, match="Flow timeouts"):
        Demo().handle_timeout(None)  # type: ignore[arg-type]

    class Handles(Flow[int]):
        def handle_timeout(self, context: Context) -> StepDecision:
            return dex.force_fail("timed out")

    assert Handles().handle_timeout(None).reason == "timed out"  # type: ignore[arg-type]


def test_recovery_error_info_is_positional() -> None:
    info = RecoveryErrorInfo("boom", "RuntimeError")
    assert (info.detail, info.error_type) == ("boom", "RuntimeError")


def test_step_output_is_only_built_by_its_functions() -> None:
    with pytest.raises(TypeError, match="heartbeat"):
        StepOutput("x", key=1)
    assert isinstance(heartbeat(), StepOutput)
