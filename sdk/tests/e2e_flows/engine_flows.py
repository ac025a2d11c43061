"""Flows for step-completion waits, skipped timers, Flow timeouts and FlowConfig."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dex import (
    Attribute,
    Channel,
    ConditionCombination,
    Context,
    Flow,
    PersistenceSchema,
    Registry,
    Step,
    StepDecision,
    StepDurability,
    StepList,
    StepMovement,
    StepOptions,
    Timer,
    Wait,
    force_complete_if_channels_empty,
    rpc,
)

GO = Channel("go", int)
HOUR = timedelta(hours=1)

# --------------------------------------------------------------------------- step waits


class Hold(Step[int]):
    """Waits for one ``go`` message, then hands over to ``After`` (the Flow stays open)."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(GO.for_one())

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to(After, input + sum(GO.results(context)))


class After(Step[int]):
    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(GO.for_one())

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input + sum(GO.results(context)))


class GateFlow(Flow[int]):
    """Hold(n) -> After: each Step waits for one ``go`` message (sent with ``go``)."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Hold()).other_steps(After())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)

    @rpc
    def go(self, context: Context, input: int) -> None:
        GO.publish(context, input)


# --------------------------------------------------------------------------- timers


@dataclass(frozen=True, kw_only=True)
class TimersSeen:
    fired: list[bool]
    messages: list[int]


class LongTimers(Step[str]):
    """``all``: two one-hour timers "a" and "b"; ``any``: a ``go`` message or "reminder"."""

    def wait_for(self, context: Context, input: str) -> Wait:
        if input == "all":
            return Wait.all_of(
                Timer.by_duration(HOUR, condition_id="a"),
                Timer.by_duration(HOUR, condition_id="b"),
            )
        return Wait.any_of(GO.for_one(), Timer.by_duration(HOUR, condition_id="reminder"))

    def execute(self, context: Context, input: str) -> StepDecision:
        count = 2 if input == "all" else 1
        fired = [context.has_timer_fired(i) for i in range(count)]
        return StepDecision.graceful_complete(
            TimersSeen(fired=fired, messages=list(GO.results(context)))
        )


class TimersFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(LongTimers())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)

    @rpc
    def go(self, context: Context, input: int) -> None:
        GO.publish(context, input)


# --------------------------------------------------------------------------- FlowConfig


class Plain(Step[int]):
    """No durability of its own: the Flow's ``step_durability`` applies."""

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to(Routed, input)


class Recover(Step[None]):
    def execute(self, context: Context, input: None) -> StepDecision:
        return StepDecision.graceful_complete(-1)


class Routed(Step[int]):
    """Has a recovery route: its execute is SYNC whatever the Flow says."""

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to(Own, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions().on_execute_failure_proceed_to(Recover)


class Own(Step[int]):
    """Its execute says SYNC itself; its wait_for waits for one ``go`` message."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(GO.for_one())

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to(Last, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_durability=StepDurability.SYNC)


class Last(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input)


class ConfigFlow(Flow[int]):
    """Plain -> Routed -> Own (waits for ``go``) -> Last."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Plain()).other_steps(Routed(), Own(), Last(), Recover())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)

    @rpc
    def go(self, context: Context, input: int) -> None:
        GO.publish(context, input)


# --------------------------------------------------------------------------- Flow timeouts

NOTE = Attribute("note", str)


class Park(Step[int]):
    """Waits for a ``go`` message that never comes (the timeout decides)."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(GO.for_one())

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input)


class Wrap(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.force_complete(f"wrapped {input} after {NOTE.get(context)}")


class Rescue(Step[None]):
    def execute(self, context: Context, input: None) -> StepDecision:
        error = context.recovery_error
        assert error is not None
        return StepDecision.force_complete(f"rescued from {error.error_type}: {error.detail}")


class UnhandledFlow(Flow[int]):
    """No ``handle_timeout``: a DEFAULT timeout policy fails the Flow."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Park())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)


class HandledFlow(Flow[int]):
    """``handle_timeout`` writes ``note`` and moves to ``Wrap``."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Park()).other_steps(Wrap())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO, NOTE)

    async def handle_timeout(self, context: Context) -> StepDecision:  # type: ignore[override]
        NOTE.set(context, f"{context.step_type} {context.step_execution_id}")
        return StepDecision.go_to(Wrap, "late")


class FailingHandlerFlow(Flow[int]):
    """``handle_timeout`` raises; its failure route goes to ``Rescue``."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Park()).other_steps(Rescue())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)

    def handle_timeout(self, context: Context) -> StepDecision:
        raise RuntimeError("the handler gives up")


class PatientFlow(Flow[int]):
    """``handle_timeout`` lets the Flow go on (``dead_end``)."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Park())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)

    def handle_timeout(self, context: Context) -> StepDecision:
        return StepDecision.dead_end()


# ------------------------------------------------- combinations and conditional completion

LEFT = Channel("left", int)
RIGHT = Channel("right", int)
SOLO = Channel("solo", int)
JOBS = Channel("jobs", int)


@dataclass(frozen=True, kw_only=True)
class Picked:
    left: list[int]
    right: list[int]
    solo: list[int]
    timer: bool


class Pick(Step[None]):
    """Waits for (left and right) or solo or a one-hour timer, in that order of preference."""

    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.any_combination_of(
            ConditionCombination.of(
                LEFT.for_one(condition_id="l"), RIGHT.for_one(condition_id="r")
            ),
            ConditionCombination.of(SOLO.for_one(condition_id="s")),
            ConditionCombination.of(
                Timer.by_duration(HOUR, condition_id="t"), LEFT.at_most(5, condition_id="l2")
            ),
        )

    def execute(self, context: Context, input: None) -> StepDecision:
        picked = Picked(
            left=list(LEFT.results(context)),
            right=list(RIGHT.results(context)),
            solo=list(SOLO.results(context)),
            timer=context.has_timer_fired(0),
        )
        PICKED.set(context, picked)
        return StepDecision.dead_end()


class ComboFlow(Flow[None]):
    """Pick records what its Wait consumed (``picked``); RPCs publish and count."""

    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Pick())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(LEFT, RIGHT, SOLO, PICKED)

    @rpc
    def publish(self, context: Context, input: dict[str, list[int]]) -> None:
        channels = {"left": LEFT, "right": RIGHT, "solo": SOLO}
        for name, values in input.items():
            for v in values:
                channels[name].publish(context, v)

    @rpc
    def sizes(self, context: Context) -> dict[str, int]:
        return {c.name: c.size(context) for c in (LEFT, RIGHT, SOLO)}

    @rpc
    def picked(self, context: Context) -> Picked | None:
        return PICKED.get(context)


PICKED = Attribute("picked", Picked)


class Consume(Step[int]):
    """Takes up to two jobs, then completes if no job is left, else loops."""

    def wait_for(self, context: Context, input: int) -> Wait:
        return Wait.until(JOBS.at_most(2))

    def execute(self, context: Context, input: int) -> StepDecision:
        total = input + sum(JOBS.results(context))
        return force_complete_if_channels_empty(total, StepMovement.of(Consume, total), JOBS)


class Seed(Step[list[int]]):
    def execute(self, context: Context, input: list[int]) -> StepDecision:
        for v in input:
            JOBS.publish(context, v)
        return StepDecision.go_to(Consume, 0)


class DrainFlow(Flow[list[int]]):
    """Seed(jobs) publishes them; Consume drains two at a time and completes when empty."""

    def get_steps(self) -> StepList[list[int]]:
        return StepList.start_step(Seed()).other_steps(Consume())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(JOBS)


GATE_FLOW = GateFlow()
TIMERS_FLOW = TimersFlow()
CONFIG_FLOW = ConfigFlow()
UNHANDLED_FLOW = UnhandledFlow()
HANDLED_FLOW = HandledFlow()
FAILING_HANDLER_FLOW = FailingHandlerFlow()
PATIENT_FLOW = PatientFlow()
COMBO_FLOW = ComboFlow()
DRAIN_FLOW = DrainFlow()
FLOWS: list[Flow[Any]] = [
    GATE_FLOW,
    TIMERS_FLOW,
    CONFIG_FLOW,
    UNHANDLED_FLOW,
    HANDLED_FLOW,
    FAILING_HANDLER_FLOW,
    PATIENT_FLOW,
    COMBO_FLOW,
    DRAIN_FLOW,
]


def registry() -> Registry:
    """The Worker children's registry (``tests.e2e_flows.engine_flows:registry``)."""
    return Registry(FLOWS, allow_async_handlers=True)
