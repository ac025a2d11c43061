from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from dex_agents import AgentSessionFlow
from dex_agents.testing import AgentTestStack, InvocationLog

from tests.agent_defs import SCENARIOS_ENV, STATE_DIR_ENV, build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]


class Scenario:
    """One test's stack, Flow, sessions client and invocation log."""

    def __init__(self, stack: AgentTestStack, flow: AgentSessionFlow, state_dir: Path) -> None:
        self.stack = stack
        self.flow = flow
        self.state_dir = state_dir
        self.sessions = stack.sessions(flow)
        self.log = InvocationLog(state_dir / "calls.log")


ScenarioFactory = Callable[[str], AbstractAsyncContextManager[Scenario]]


@pytest.fixture
def scenario(tmp_path: Path) -> ScenarioFactory:
    """Start a stack serving one scenario: ``async with scenario("desk") as s``."""

    @asynccontextmanager
    async def start(name: str) -> AsyncIterator[Scenario]:
        state_dir = tmp_path / "state"
        state_dir.mkdir(exist_ok=True)
        flow = build_flow(name, state_dir)
        env = {SCENARIOS_ENV: name, STATE_DIR_ENV: str(state_dir)}
        async with AgentTestStack(
            tmp_path, [flow], "tests.agent_worker", worker_cwd=PACKAGE_DIR, worker_env=env
        ) as stack:
            yield Scenario(stack, flow, state_dir)

    return start
