"""SubFlow conditions on the Worker side: their wire form and the readers in execute."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import msgspec
from dex import (
    Attribute,
    Context,
    Flow,
    FlowConfig,
    FlowTimeoutPolicy,
    PersistenceSchema,
    Registry,
    RetryPolicy,
    Step,
    StepDecision,
    StepDurability,
    StepList,
    SubFlow,
    SubFlowOptions,
    SubFlowReusePolicy,
    Timer,
    Wait,
    WorkerTarget,
)
from dex._invoke import invoke
from dex._protocol import (
    CompletionWire,
    ConditionResultsWire,
    FlowResultWire,
    SubFlowResultWire,
    TaskResult,
)

from .unit_support import RecordingIO, decode, task

Seed = Attribute("Seed", int)


class KidStart(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input)


class Kid(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(KidStart())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(Seed)


KID = Kid()
OPTIONS: dict[str, SubFlowOptions] = {}


class Spawn(Step[Any]):
    def wait_for(self, context: Context, input: Any) -> Wait:
        return Wait.any_of(
            Timer.by_duration(1), SubFlow.run(KID, input, OPTIONS.get("spawn", SubFlowOptions()))
        )

    def execute(self, context: Context, input: Any) -> StepDecision:
        result = SubFlow.get_condition_results(context, input)
        return StepDecision.graceful_complete(
            [SubFlow.get_flow_id(context, input), result.status.name, result.single_output(int)]
        )


class Parent(Flow[Any]):
    def get_steps(self) -> StepList[Any]:
        return StepList.start_step(Spawn())


PARENT = Parent()


def run(registry: Registry, kind: str, value: object, **fields: Any) -> TaskResult:
    t = task(kind, "Spawn", flow_type="Parent", input=value, **fields)
    return asyncio.run(invoke(registry, t, RecordingIO()))


def test_the_worker_sends_the_child_start_with_the_wait() -> None:
    OPTIONS["spawn"] = SubFlowOptions(
        reuse_policy=SubFlowReusePolicy.ATTACH,
        start_delay=timedelta(seconds=2),
        condition_id="kid",
    ).with_attribute(Seed, 7)
    try:
        res = run(Registry([PARENT, KID]), "wait_for", 5)
    finally:
        OPTIONS.clear()
    assert res.error is None and res.wait is not None
    timer, child = res.wait.conditions
    assert (timer.kind, child.kind, child.condition_id) == ("timer", "subflow", "kid")
    sub = child.subflow
    assert sub is not None and sub.flow_type == "Kid" and sub.spec.start_step == "KidStart"
    assert decode(sub.input) == 5 and sub.reuse_policy == "attach" and sub.start_delay_s == 2.0
    assert [(a.name, decode(a.value)) for a in sub.initial_attributes] == [("Seed", 7)]
    assert sub.requires == [] and child.flow_id is None and child.run_id is None


def test_a_child_the_worker_does_not_serve_is_compiled_on_its_own() -> None:
    res = run(Registry([PARENT]), "wait_for", 3)
    assert res.error is None and res.wait is not None
    sub = res.wait.conditions[1].subflow
    assert sub is not None and sub.flow_type == "Kid" and decode(sub.input) == 3


def test_child_options_the_server_cannot_run_are_named_for_it() -> None:
    OPTIONS["spawn"] = SubFlowOptions(
        retry_policy=RetryPolicy(maximum_attempts=2),
        config_override=FlowConfig(worker_target=WorkerTarget(address="http://w:1")),
    )
    try:
        res = run(Registry([PARENT, KID]), "wait_for", 3)
    finally:
        OPTIONS.clear()
    assert res.wait is not None and res.wait.conditions[1].subflow is not None
    assert res.wait.conditions[1].subflow.requires == [
        "SubFlow retries (SubFlowOptions.retry_policy)",
        "SubFlowOptions.config_override.worker_target other than pull Workers (listening Workers)",
    ]


def test_a_child_timeout_and_config_override_travel_with_its_start() -> None:
    OPTIONS["spawn"] = SubFlowOptions(
        timeout=timedelta(minutes=1),
        timeout_policy=FlowTimeoutPolicy.CANCEL,
        config_override=FlowConfig(step_durability=StepDurability.ASYNC),
    )
    try:
        res = run(Registry([PARENT, KID]), "wait_for", 3)
    finally:
        OPTIONS.clear()
    assert res.error is None and res.wait is not None
    sub = res.wait.conditions[1].subflow
    assert sub is not None and sub.requires == []
    assert sub.timeout is not None and (sub.timeout.timeout_s, sub.timeout.policy) == (
        60.0,
        "cancel",
    )
    assert sub.config is not None and sub.config.step_durability == "async"
    assert sub.config.continue_as_new_threshold is None


def test_an_invalid_child_timeout_fails_the_attempt_for_good() -> None:
    OPTIONS["spawn"] = SubFlowOptions(timeout=timedelta(seconds=-1))
    try:
        res = run(Registry([PARENT, KID]), "wait_for", 3)
    finally:
        OPTIONS.clear()
    assert res.error is not None and res.error.non_retryable
    assert "SubFlowOptions.timeout" in res.error.message


def test_a_child_input_of_the_wrong_type_fails_the_attempt_for_good() -> None:
    res = run(Registry([PARENT, KID]), "wait_for", "not an int")
    assert res.error is not None and res.error.non_retryable


def _results(status: str, output: int | None) -> ConditionResultsWire:
    completions = (
        []
        if output is None
        else [
            CompletionWire(
                step_type="KidStart",
                step_execution_id="KidStart-1",
                output=msgspec.Raw(b"%d" % output),
            )
        ]
    )
    return ConditionResultsWire(
        timers_fired=[False],
        subflows=[
            SubFlowResultWire(
                flow_id="SubFlow:flow-1-Spawn-1-0",
                run_id="r",
                result=FlowResultWire(status=status, completions=completions),  # type: ignore[arg-type]
            )
        ],
    )


def test_execute_reads_the_child_id_and_result() -> None:
    res = run(Registry([PARENT, KID]), "execute", 0, condition_results=_results("completed", 9))
    assert res.error is None and res.decision is not None
    assert decode(res.decision.output) == ["SubFlow:flow-1-Spawn-1-0", "COMPLETED", 9]


def test_reading_a_subflow_the_wait_did_not_have_fails_with_index_error() -> None:
    res = run(Registry([PARENT, KID]), "execute", 1, condition_results=_results("running", None))
    assert res.error is not None and res.error.error_type == "IndexError"
    assert "no SubFlow condition 1" in res.error.message
