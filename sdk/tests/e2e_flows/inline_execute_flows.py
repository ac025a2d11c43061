"""A waiting Step whose ``execute`` may come with the result that satisfies its Wait
(``StepOptions.execute_inline``).

``Gather`` appends one line to the file its input names each time its ``execute`` runs,
so a test can count the runs: once when the server took the inline outcome or when the
Worker did not try, twice when the server refused it and dispatched the method.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dex import (
    AttributeMap,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    Wait,
)

RESULTS = Channel("ie_results", str)
RECORDS = AttributeMap("ie_records", str)
# blob_threshold_bytes is 2048 by default: a longer value is kept as a blob
_BIG = 3000


class Fan(Step[str]):
    """``<mode>|<count file>``: two Parts and a Gather.

    ``busy`` publishes a message of its own first (the Wait then takes it: the Worker
    does not try), ``big`` makes the Parts write values the server keeps as blobs (the
    Worker's snapshot then differs from the server's).
    """

    def execute(self, context: Context, input: str) -> StepDecision:
        mode, path = input.split("|", 1)
        if mode == "busy":
            RESULTS.publish(context, "early")
        size = _BIG if mode == "big" else 0
        return StepDecision.go_to_many(
            StepMovement.of(Part, f"a|{size}"),
            StepMovement.of(Part, f"b|{size}"),
            StepMovement.of(Gather, path),
        )


class Part(Step[str]):
    """Writes its record and publishes its result."""

    async def execute(self, context: Context, input: str) -> StepDecision:
        name, size = input.split("|")
        RECORDS.set(context, name, f"done {name}" + "x" * int(size))
        RESULTS.publish(context, f"r-{name}")
        return StepDecision.dead_end()


class Gather(Step[str]):
    """Waits for two results; completes with them and the records' sizes."""

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            wait_for_load_attribute_maps=(RECORDS,),
            execute_load_attribute_maps=(RECORDS,),
            execute_inline=True,
        )

    async def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(RESULTS.for_n(2))

    async def execute(self, context: Context, input: str) -> StepDecision:
        with Path(input).open("a") as f:
            f.write("execute\n")
        records = {
            k: len(RECORDS.get(context, k) or "") for k in RECORDS.get_all_instance_keys(context)
        }
        sizes = ",".join(f"{k}={v}" for k, v in sorted(records.items()))
        results = ",".join(sorted(RESULTS.results(context)))
        return StepDecision.graceful_complete(f"{results}|{sizes}")


class InlineExecutes(Flow[str]):
    """Fan -> two Parts and a Gather waiting for their results."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Fan()).other_steps(Part(), Gather())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(RESULTS, RECORDS)


INLINE_EXECUTES = InlineExecutes()
FLOWS: list[Flow[Any]] = [INLINE_EXECUTES]
