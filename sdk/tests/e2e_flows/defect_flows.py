"""Flows for engine defects seen through the SDK (``test_e2e_defects``)."""

from __future__ import annotations

import os
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
    rpc,
)

from tests.e2e_flows.common import append_log
from tests.support import FileGate


class FanOutToNothing(Step[str]):
    """Returns ``go_to_many()`` with no movement: invalid, not a dead end."""

    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(input, f"fan-out {context.attempt} {os.getpid()}")
        return StepDecision.go_to_many()

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1)))


class EmptyFanOut(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(FanOutToNothing())


COUNT = Attribute("count", int)


class Idle(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.dead_end()


class HeldCounter(Flow[str]):
    """``add_one`` adds 1 to ``count`` after parking at gate ``<flow_id>-txn``."""

    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Idle())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(COUNT)

    @rpc(is_transactional=True)
    async def add_one(self, context: Context) -> int:
        n = COUNT.get(context) or 0
        await FileGate.from_env(f"{context.flow_id}-txn").async_pass_through()
        COUNT.set(context, n + 1)
        return n

    @rpc
    def set_to(self, context: Context, input: int) -> None:
        append_log(context.flow_id, f"set_to {input}")
        COUNT.set(context, input)

    @rpc
    def read(self, context: Context) -> int:
        return COUNT.get(context) or 0


EMPTY_FAN_OUT = EmptyFanOut()
HELD_COUNTER = HeldCounter()
FLOWS: list[Flow[Any]] = [EMPTY_FAN_OUT, HELD_COUNTER]
