"""Flows for SubFlow tests: parents that wait on child Flows, children a test controls.

A parent's input is ``"<policy>|<mode>|<tag>"``: ``policy`` names a ``SubFlowReusePolicy``
(``default`` for none given, ``timeout`` for a short FAIL timeout of the child, ``config``
for a config override, ``retry`` for a retry policy this server does not run), and the
child gets
``"<mode>|<tag>"``. Child modes: ``ok`` completes at once with its run's id, ``fail``
fails the child Flow, ``hold`` waits on the child's ``go`` Channel (the ``release`` RPC
publishes to it), ``gate`` parks at the file gate ``<tag>-child`` the first time it runs.
Parents log ``"parent-execute <attempt> <pid>"`` and children ``"child <mode>"`` to the
log named by the tag.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from dex import (
    Channel,
    Context,
    Flow,
    FlowConfig,
    FlowTimeoutPolicy,
    PersistenceSchema,
    Registry,
    RetryPolicy,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    SubFlow,
    SubFlowOptions,
    SubFlowReusePolicy,
    Timer,
    Wait,
    rpc,
)

from tests.e2e_flows.common import append_log
from tests.support import FileGate

GO = Channel("go", str)


def _split(value: str) -> list[str]:
    return value.split("|")


class ChildWork(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        mode, _ = _split(input)
        if mode == "hold":
            return Wait.until(GO.for_one())
        return Wait.skip_immediately()

    def execute(self, context: Context, input: str) -> StepDecision:
        mode, tag = _split(input)
        append_log(tag, f"child {mode}")
        if mode == "fail":
            return StepDecision.force_fail(f"child {tag} failed on purpose")
        if mode == "gate":
            gate = FileGate.from_env(f"{tag}-child")
            if gate.reached_count() == 0:
                gate.pass_through()
        return StepDecision.graceful_complete(f"child {mode} {tag} run {context.run_id}")

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=5)
        )


class Child(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(ChildWork())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)

    @rpc(is_transactional=True)
    def release(self, context: Context, input: str) -> RPCResult[None]:
        GO.publish(context, input)
        return RPCResult(output=None)


CHILD = Child()


def _options(policy: str) -> SubFlowOptions:
    if policy == "default":
        return SubFlowOptions()
    if policy == "timeout":
        return SubFlowOptions(timeout=timedelta(seconds=0.5), timeout_policy=FlowTimeoutPolicy.FAIL)
    if policy == "config":
        return SubFlowOptions(config_override=FlowConfig(continue_as_new_threshold=7))
    if policy == "retry":  # a child option this server does not run
        return SubFlowOptions(retry_policy=RetryPolicy(maximum_attempts=2))
    return SubFlowOptions(reuse_policy=SubFlowReusePolicy[policy.upper()])


def _report(context: Context) -> dict[str, Any]:
    result = SubFlow.get_condition_results(context)
    return {
        "flow_id": SubFlow.get_flow_id(context),
        "status": result.status.name,
        "error": result.error_message,
        "output": result.single_output(str) if result.completions else None,
        "timer": context.has_timer_fired(),
    }


class Spawn(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        policy, mode, tag = _split(input)
        return Wait.until(SubFlow.run(CHILD, f"{mode}|{tag}", _options(policy)))

    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(_split(input)[2], f"parent-execute {context.attempt} {os.getpid()}")
        return StepDecision.graceful_complete(_report(context))


class Parent(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Spawn())


class SpawnOrTimeout(Step[str]):
    """Waits for a held child or a short Timer: the Timer wins, the parent completes."""

    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.any_of(
            SubFlow.run(CHILD, f"hold|{input}"), Timer.by_duration(timedelta(seconds=0.2))
        )

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete(_report(context))


class ImpatientParent(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(SpawnOrTimeout())


class SpawnTwo(Step[str]):
    """Two children at once (IDs ``...-0`` and ``...-1``), both awaited."""

    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.all_of(SubFlow.run(CHILD, f"ok|{input}"), SubFlow.run(CHILD, f"fail|{input}"))

    def execute(self, context: Context, input: str) -> StepDecision:
        out = []
        for i in range(2):
            r = SubFlow.get_condition_results(context, i)
            out.append([SubFlow.get_flow_id(context, i), r.status.name])
        return StepDecision.graceful_complete(out)


class TwinParent(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(SpawnTwo())


PARENT = Parent()
IMPATIENT = ImpatientParent()
TWINS = TwinParent()
FLOWS: list[Flow[Any]] = [PARENT, IMPATIENT, TWINS, CHILD]


def parents_only() -> Registry:
    """A Worker registry without the child Flow (it runs on another Worker)."""
    return Registry([PARENT, IMPATIENT, TWINS])


def children_only() -> Registry:
    """A Worker registry that runs only child Flows."""
    return Registry([CHILD])
