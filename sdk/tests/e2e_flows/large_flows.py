"""Flows whose Step results are large: many Attributes of a few MiB each.

``Fill`` writes ``count`` Attributes of ``size`` bytes (JSON strings) in one result and
logs each run to ``large.log`` in the gate directory, so a test counts how often it ran.
``Companion`` holds a task on the same Worker meanwhile.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from dex import (
    Attribute,
    Context,
    Flow,
    PersistenceSchema,
    Registry,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    rpc,
)

from tests.e2e_flows.common import append_log

SLOTS = tuple(Attribute(f"slot{i}", str) for i in range(8))


@dataclass(frozen=True, kw_only=True)
class FillPlan:
    count: int
    size: int  # bytes of each value's JSON (the string plus its two quotes)


class Fill(Step[FillPlan]):
    def execute(self, context: Context, input: FillPlan) -> StepDecision:
        append_log("large", f"fill {context.flow_id} {context.attempt}")
        for i in range(input.count):
            SLOTS[i].set(context, chr(ord("a") + i) * (input.size - 2))
        return StepDecision.graceful_complete(input.count)

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(maximum_attempts=3))


class Filler(Flow[FillPlan]):
    def get_steps(self) -> StepList[FillPlan]:
        return StepList.start_step(Fill())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(*SLOTS)

    @rpc
    def sizes(self, context: Context) -> list[int]:
        return [len(s.get(context) or "") for s in SLOTS]


class Linger(Step[float]):
    async def execute(self, context: Context, input: float) -> StepDecision:
        append_log("large", f"linger {context.flow_id} {context.attempt}")
        await asyncio.sleep(input)
        return StepDecision.graceful_complete(context.attempt)


class Companion(Flow[float]):
    def get_steps(self) -> StepList[float]:
        return StepList.start_step(Linger())


FILLER = Filler()
COMPANION = Companion()


def registry() -> Registry:
    return Registry([FILLER, COMPANION], allow_async_handlers=True)
