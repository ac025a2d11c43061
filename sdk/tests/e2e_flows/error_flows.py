"""Flows for bad input: a decision naming a Step the Flow lacks, typed inputs, big values;
and a Step that asks for its own retry delay."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from dex import (
    Attribute,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    retry_after,
    rpc,
)

MARK = Attribute("mark", int)
BLOB = Attribute("blob", str)


class Unregistered(Step[int]):
    """Deliberately absent from every Flow's Step list."""

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input)


class GoAstray(Step[int]):
    """Writes ``mark`` and names a Step the Flow does not have: nothing may commit."""

    def execute(self, context: Context, input: int) -> StepDecision:
        MARK.set(context, input)
        return StepDecision.go_to(Unregistered, input)


class StrayDecision(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(GoAstray())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(MARK)

    @rpc
    def mark(self, context: Context) -> int:
        return MARK.get(context) or 0


class Store(Step[str]):
    """Stores its (large) input in the ``blob`` Attribute and completes."""

    def execute(self, context: Context, input: str) -> StepDecision:
        BLOB.set(context, input)
        return StepDecision.graceful_complete(len(input))


class Keeper(Flow[str]):
    """Keeps a value in an Attribute; ``size`` reads it back (effect-free)."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Store())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(BLOB)

    @rpc
    def size(self, context: Context) -> int:
        return len(BLOB.get(context) or "")

    @rpc
    def touch(self, context: Context) -> None:
        BLOB.set(context, "touched")


class Counted(Step[int]):
    """Takes an int; a start without input, or a movement with a string, cannot run it."""

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input + 1)


class Typed(Flow[int]):
    """Starts at ``Counted``, under the default retry policy."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Counted())


class Mistype(Step[str]):
    """Moves to ``Counted`` with its string input: the int Step cannot take it."""

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.go_to(Counted, input)


class MistypedMove(Flow[str]):
    """``Mistype`` then ``Counted``, under the default retry policy."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Mistype()).other_steps(Counted())


class NotRegistered(Flow[int]):
    """A Flow no Registry holds."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Unregistered())


@dataclass(frozen=True, kw_only=True)
class LastFailure:
    error_type: str | None
    detail: str | None


class Busy(Step[str]):
    """Fails every attempt with ``retry_after(1, ValueError)``; its policy would wait 10 min."""

    def execute(self, context: Context, input: str) -> StepDecision:
        raise retry_after(1, ValueError(f"busy on attempt {context.attempt}"))

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(minutes=10), maximum_attempts=2)
        ).on_execute_failure_proceed_to(AfterBusy)


class AfterBusy(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        error = context.recovery_error
        return StepDecision.graceful_complete(
            LastFailure(
                error_type=None if error is None else error.error_type,
                detail=None if error is None else error.detail,
            )
        )


class RetryLater(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Busy()).other_steps(AfterBusy())


STRAY_DECISION = StrayDecision()
KEEPER = Keeper()
TYPED = Typed()
MISTYPED_MOVE = MistypedMove()
NOT_REGISTERED = NotRegistered()
RETRY_LATER = RetryLater()
FLOWS: list[Flow[Any]] = [STRAY_DECISION, KEEPER, TYPED, MISTYPED_MOVE, RETRY_LATER]
