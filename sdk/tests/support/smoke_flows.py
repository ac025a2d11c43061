"""Small Flows the runtime smoke tests run in Worker child processes."""

from __future__ import annotations

from collections.abc import Generator

from dex import (
    Attribute,
    Context,
    Flow,
    PersistenceSchema,
    Registry,
    Step,
    StepDecision,
    StepList,
    StepOutput,
    Stream,
    rpc,
)

from tests.support.gates import FileGate

# --------------------------------------------------------------------------- two Steps


class AddOne(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.go_to(TimesTen, input + 1)


class TimesTen(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input * 10)


class TwoSteps(Flow[int]):
    """AddOne(x) -> TimesTen(x + 1), which completes with 10 * (x + 1)."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(AddOne()).other_steps(TimesTen())


# --------------------------------------------------------------------------- RPC

COUNT = Attribute("count", int)


class Counter(Flow[None]):
    """No Steps: driven by its RPCs only."""

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(COUNT)

    @rpc(is_transactional=True)
    def add(self, context: Context, amount: int) -> int:
        total = (COUNT.get(context) or 0) + amount
        COUNT.set(context, total)
        return total

    @rpc
    def read(self, context: Context) -> int:
        return COUNT.get(context) or 0


# --------------------------------------------------------------------------- Stream

OUT = Stream("out", str)


class Emit(Step[int]):
    def execute(self, context: Context, input: int) -> Generator[StepOutput, None, StepDecision]:
        for i in range(input):
            yield OUT.write(context, f"m{i}")
        return StepDecision.graceful_complete(input)


class Emitter(Flow[int]):
    """Writes ``m0 .. m<n-1>`` to the ``out`` Stream, then completes with n."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Emit())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(OUT)


# --------------------------------------------------------------------------- drain


class Slow(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        FileGate.from_env("slow").pass_through()
        return StepDecision.graceful_complete(f"{input}:done")


class SlowFlow(Flow[str]):
    """One Step that waits at the ``slow`` gate before completing."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Slow())


# --------------------------------------------------------------------------- blobs

BIG = Attribute("big", str)


class ReadBig(Step[int]):
    """Reads the big Attribute in every one of ``input`` Steps, then completes with its size."""

    def execute(self, context: Context, input: int) -> StepDecision:
        size = len(BIG.get(context) or "")
        if input <= 1:
            return StepDecision.graceful_complete(size)
        return StepDecision.go_to(ReadBig, input - 1)


class BigValue(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(ReadBig())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(BIG)


def registry() -> Registry:
    """The Registry of every smoke Flow (the Worker child's factory)."""
    return Registry([TwoSteps(), Counter(), Emitter(), SlowFlow(), BigValue()])
