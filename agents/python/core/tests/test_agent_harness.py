from __future__ import annotations

import signal

import pytest

from tests.agent_helpers import wait_idle
from tests.conftest import ScenarioFactory


async def test_workers_stop_gracefully_or_die_at_once(scenario: ScenarioFactory) -> None:
    async with scenario("router") as s:
        graceful = await s.stack.start_worker()
        graceful.terminate()
        assert await graceful.wait(timeout=20) == 0, graceful.log_tail()

        killed = await s.stack.start_worker()
        killed.kill()
        assert not killed.is_running()
        assert await killed.wait(timeout=1) == -signal.SIGKILL

        # A later Worker serves the session as usual.
        await s.stack.start_worker()
        await s.sessions.start_session("harness-1", "hi")
        await wait_idle(s.sessions, "harness-1", turns=1)
        history = await s.stack.read_step_history("harness-1")
        assert [e.step_type for e in history][:2] == ["StartAgentSession", "RunModel"]


async def test_reading_the_history_of_an_unknown_session_fails_clearly(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("router") as s:
        with pytest.raises(RuntimeError, match="no-such-session"):
            await s.stack.read_step_history("no-such-session")
