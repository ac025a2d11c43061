"""A worker script as a user writes it: no logging set up, no options (env defaults).

Run as ``python talking_worker.py``; env ``DEX_SERVER_ADDRESS`` (and ``DEX_TOKEN`` when the
server wants one) say where to connect. Its one Flow's Step raises a ``TypeError``.
"""

from __future__ import annotations

import asyncio

from dex import (
    AsyncWorker,
    Context,
    Flow,
    Registry,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
)


class Broken(Step[int]):
    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_retry=RetryPolicy(initial_interval=0.05, maximum_attempts=2))

    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input + "one")  # type: ignore[operator]


class TalkingFlow(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(Broken())


def registry() -> Registry:
    return Registry([TalkingFlow()])


if __name__ == "__main__":
    asyncio.run(AsyncWorker(registry()).run())
