"""Flows for the Step primitives: sequences, fan-out, completion, failure, cancellation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dex import (
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    Wait,
    rpc,
)

# --------------------------------------------------------------------------- sequential


@dataclass(frozen=True, kw_only=True)
class Trace:
    """What a Step saw of its own identity, returned as a Flow output."""

    value: int
    flow_id: str
    step_type: str
    step_execution_id: str
    from_step_execution_id: str
    attempt: int


class SeqAdd(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to(SeqDouble, input + 1)


class SeqDouble(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to(SeqFinish, input * 2)


class SeqFinish(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(
            Trace(
                value=input,
                flow_id=context.flow_id,
                step_type=context.step_type or "",
                step_execution_id=context.step_execution_id or "",
                from_step_execution_id=context.from_step_execution_id or "",
                attempt=context.attempt,
            )
        )


class Sequential(Flow[int]):
    """SeqAdd(x) -> SeqDouble(x + 1) -> SeqFinish(2x + 2), which completes with a Trace."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(SeqAdd()).other_steps(SeqDouble(), SeqFinish())


# --------------------------------------------------------------------------- fan-out


class Scatter(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to_many(*(StepMovement.of(Square, i) for i in range(input)))


class Square(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input * input)


class FanOut(Flow[int]):
    """Scatter(n) fans out to n Square Steps; each completes gracefully with i*i."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Scatter()).other_steps(Square())


# --------------------------------------------------------------------------- completion

RELEASE = Channel("release", str)


class Fork(Step[str]):
    """Fans out to a Step parked on the ``release`` Channel and a Step that decides."""

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.go_to_many(
            StepMovement.of(ParkedUntilRelease, "parked"),
            StepMovement.of(Decide, input),
        )


class ParkedUntilRelease(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(RELEASE.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        released = RELEASE.results(context)
        return StepDecision.graceful_complete(f"{input}:{','.join(released)}")


class Decide(Step[str]):
    """Closes the Flow the way its input names."""

    def execute(self, context: Context, input: str) -> StepDecision:
        if input == "graceful":
            return StepDecision.graceful_complete("decided")
        if input == "force":
            return StepDecision.force_complete("forced")
        if input == "fail":
            return StepDecision.force_fail("decided to fail")
        return StepDecision.dead_end()


class Completion(Flow[str]):
    """Fork -> (ParkedUntilRelease, Decide(mode)); ``release`` RPC publishes one message."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Fork()).other_steps(ParkedUntilRelease(), Decide())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(RELEASE)

    @rpc(is_transactional=True)
    def release(self, context: Context, input: str) -> None:
        RELEASE.publish(context, input)


# --------------------------------------------------------------------------- cancellation

GO = Channel("go", str)


class CancelRoot(Step[str]):
    """Mode ``all``: two Blockers and a Canceler. Mode ``siblings``: two Branches."""

    def execute(self, context: Context, input: str) -> StepDecision:
        if input == "all":
            return StepDecision.go_to_many(
                StepMovement.of(Blocker, "b1"),
                StepMovement.of(Blocker, "b2"),
                StepMovement.of(Canceler, "c"),
            )
        return StepDecision.go_to_many(
            StepMovement.of(Branch, "a"),
            StepMovement.of(Branch, "b"),
        )


class Blocker(Step[str]):
    """Waits on ``go``; whoever gets a message completes the Flow with its own input."""

    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(GO.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.force_complete(f"{input}@{context.from_step_execution_id}")


class Canceler(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete("canceled-all").with_canceling_steps(Blocker)


class Branch(Step[str]):
    """Branch ``a`` schedules a Blocker and a sibling Canceler; ``b`` only a Blocker."""

    def execute(self, context: Context, input: str) -> StepDecision:
        if input == "a":
            return StepDecision.go_to_many(
                StepMovement.of(Blocker, "a"),
                StepMovement.of(SiblingCanceler, "a"),
            )
        return StepDecision.go_to(Blocker, "b")


class SiblingCanceler(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.dead_end().with_canceling_sibling_steps(Blocker)


class Cancellation(Flow[str]):
    """Canceling Steps (mode ``all``) and sibling Steps (mode ``siblings``)."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(CancelRoot()).other_steps(
            Blocker(), Canceler(), Branch(), SiblingCanceler()
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(GO)

    @rpc
    def go(self, context: Context) -> None:
        GO.publish(context, "go")

    @rpc(is_transactional=True)
    def cancel_blockers(self, context: Context) -> RPCResult[str]:
        return RPCResult(output="ok", canceling_steps=(Blocker,))


SEQUENTIAL = Sequential()
FAN_OUT = FanOut()
COMPLETION = Completion()
CANCELLATION = Cancellation()
FLOWS: list[Flow[Any]] = [SEQUENTIAL, FAN_OUT, COMPLETION, CANCELLATION]
