"""A live turn against OpenAI through a real server; skipped without OPENAI_API_KEY."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from dex_agents import AgentSessionFlow
from dex_agents.testing import AgentTestStack, InvocationLog, tool_call_kind

from tests.agent_defs import SCENARIOS_ENV, STATE_DIR_ENV, build_flow
from tests.conftest import PACKAGE_DIR
from tests.helpers import final_answer, wait_idle

pytestmark = pytest.mark.skipif(
    not os.environ.get("OPENAI_API_KEY"), reason="OPENAI_API_KEY is not set"
)


async def test_a_real_model_looks_up_an_order(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    flow: AgentSessionFlow = build_flow("live", state_dir)
    env = {SCENARIOS_ENV: "live", STATE_DIR_ENV: str(state_dir)}
    async with AgentTestStack(
        tmp_path, [flow], "tests.agent_worker", worker_cwd=PACKAGE_DIR, worker_env=env
    ) as stack:
        await stack.start_worker()
        sessions = stack.sessions(flow)
        await sessions.start_session("live-1", "What is the status of order 7? Use the tool.")
        snapshot = await wait_idle(sessions, "live-1", turns=1, timeout=120)
        assert InvocationLog(state_dir / "calls.log").count(tool_call_kind("lookup_order")) == 1
        assert "shipped" in final_answer(snapshot).lower()
