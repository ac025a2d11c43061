from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from dex_agents import AgentSessionFlow, AgentSnapshot, MessageRole
from dex_agents.testing import AgentTestStack, FileGate, InvocationLog, wait_for_agent_snapshot

from dex_agents_claude_agent_sdk.testing import FakeMessagesServer, ModelCall
from tests.agent_defs import MODEL_GATES, MODEL_KIND, SCENARIO_ENV, STATE_DIR_ENV, build_flow
from tests.agent_defs import script as desk_script

PACKAGE_DIR = Path(__file__).resolve().parents[1]


class Scenario:
    """One test's fake model API, stack, Flow, sessions client and invocation log."""

    def __init__(
        self,
        stack: AgentTestStack,
        flow: AgentSessionFlow,
        state_dir: Path,
        model: FakeMessagesServer,
    ) -> None:
        self.stack = stack
        self.flow = flow
        self.state_dir = state_dir
        self.model = model
        self.sessions = stack.sessions(flow)
        self.log = InvocationLog(state_dir / "calls.log")

    async def wait_for_answers(self, session_id: str, count: int) -> AgentSnapshot:
        """Wait until ``count`` turns completed and the session waits for the user again."""

        def done(snapshot: AgentSnapshot) -> AgentSnapshot | None:
            state = snapshot.state
            if state is None or state.active_turn_id is not None:
                return None
            users = [m for m in snapshot.messages if m.role is MessageRole.USER]
            answered = snapshot.messages and snapshot.messages[-1].role is MessageRole.ASSISTANT
            return snapshot if len(users) >= count and answered else None

        return await wait_for_agent_snapshot(
            self.sessions, session_id, done, description=f"{count} completed turn(s)", timeout=90
        )


ScenarioFactory = Callable[[str], AbstractAsyncContextManager[Scenario]]


def _hold_at_gate(scenario: str, state_dir: Path) -> Callable[[ModelCall], None]:
    log = InvocationLog(state_dir / "calls.log")
    released = threading.Event()

    def on_call(call: ModelCall) -> None:
        key = f"turn-{call.turn_number}/call-{call.call_index}"
        log.record(MODEL_KIND, key)
        name = MODEL_GATES.get(scenario)
        if name == f"model-turn-{call.turn_number}-call-{call.call_index}":
            gate = FileGate(state_dir, name)
            gate.mark_reached()
            # Runs in the request's own server thread: hold the model call open.
            while not gate.is_released():
                released.wait(0.01)

    return on_call


@pytest.fixture
def scenario(tmp_path: Path) -> ScenarioFactory:
    """Start a fake model API and a stack serving one scenario."""

    @asynccontextmanager
    async def start(name: str) -> AsyncIterator[Scenario]:
        state_dir = tmp_path / "state"
        state_dir.mkdir(exist_ok=True)
        flow = build_flow(name, state_dir)
        with FakeMessagesServer(
            lambda call: desk_script(name, call), on_call=_hold_at_gate(name, state_dir)
        ) as model:
            env = {SCENARIO_ENV: name, STATE_DIR_ENV: str(state_dir)}
            env.update(model.cli_env(home=tmp_path / "home"))
            async with AgentTestStack(
                tmp_path, [flow], "tests.agent_worker", worker_cwd=PACKAGE_DIR, worker_env=env
            ) as stack:
                yield Scenario(stack, flow, state_dir, model)

    return start
