"""Flows for engine defects seen through the SDK (``test_e2e_defects``)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from dex import Context, Flow, RetryPolicy, Step, StepDecision, StepList, StepOptions

from tests.e2e_flows.common import append_log


class FanOutToNothing(Step[str]):
    """Returns ``go_to_many()`` with no movement: invalid, not a dead end."""

    def execute(self, context: Context, input: str) -> StepDecision:
        append_log(input, f"fan-out {context.attempt} {os.getpid()}")
        return StepDecision.go_to_many()

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1)))


class EmptyFanOut(Flow[str]):
    def get_steps(self) -> StepList:
        return StepList.start_step(FanOutToNothing())


EMPTY_FAN_OUT = EmptyFanOut()
FLOWS: list[Flow[Any]] = [EMPTY_FAN_OUT]
