"""The Worker child of the ``dexcli session`` tests: Dex Web's scripted agent, plus a Flow
whose only Step fails (for the history table's failure column).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dex
from dex_agents.testing import run_agent_worker

from tests._web_agent import STATE_DIR_ENV, build_flow

FAILURE_TEXT = "the ledger refused entry 42 because its checksum did not match the stored one"


class Explode(dex.Step[str]):
    def execute(self, ctx: dex.Context, input: str) -> dex.StepDecision:
        raise ValueError(f"{FAILURE_TEXT} ({input})")

    def get_step_options(self) -> dex.StepOptions:
        return dex.StepOptions(execute_retry=dex.RetryPolicy(maximum_attempts=1))


class Breaker(dex.Flow[str]):
    def get_steps(self) -> dex.StepList[str]:
        return dex.StepList.start_step(Explode())


BREAKER = Breaker()


def build_flows(state_dir: Path) -> list[dex.Flow[Any]]:
    return [build_flow(state_dir), BREAKER]


if __name__ == "__main__":
    run_agent_worker(build_flows(Path(os.environ[STATE_DIR_ENV])))
