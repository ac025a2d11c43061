from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from agents import set_tracing_disabled
from dex_agents import (
    AgentSessionClient,
    AgentSessionFlow,
    AgentSnapshot,
    AgentStatus,
    MessageRole,
)
from dex_agents.testing import AgentTestStack, InvocationLog, wait_for_agent_snapshot

from tests.agent_defs import SCENARIO_ENV, STATE_DIR_ENV, build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]

set_tracing_disabled(True)


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
        env = {SCENARIO_ENV: name, STATE_DIR_ENV: str(state_dir)}
        async with AgentTestStack(
            tmp_path, [flow], "tests.agent_worker", worker_cwd=PACKAGE_DIR, worker_env=env
        ) as stack:
            yield Scenario(stack, flow, state_dir)

    return start


async def wait_idle(
    sessions: AgentSessionClient, session_id: str, *, turns: int, timeout: float = 30.0
) -> AgentSnapshot:
    """Wait until ``turns`` turns ended and the session waits for a user message."""

    def idle(snapshot: AgentSnapshot) -> AgentSnapshot | None:
        state = snapshot.state
        done = (
            state is not None
            and state.turn_count >= turns
            and state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
            and state.active_turn_id is None
            and snapshot.queued_message_count == 0
        )
        return snapshot if done else None

    return await wait_for_agent_snapshot(
        sessions,
        session_id,
        idle,
        description=f"{session_id} idle after {turns} turn(s)",
        timeout=timeout,
    )


def final_answer(snapshot: AgentSnapshot) -> str:
    """The text of the last assistant message item."""
    messages = [
        m
        for m in snapshot.messages
        if m.role is MessageRole.ASSISTANT and m.framework_item.get("type") == "message"
    ]
    return messages[-1].text
