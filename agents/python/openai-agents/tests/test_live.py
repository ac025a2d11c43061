"""A session against the real OpenAI API: skipped unless OPENAI_API_KEY is set."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from agents import Agent
from dex_agents import AgentInterrupt, AgentSessionFlow, AgentSessionOptions, AgentSnapshot
from dex_agents.testing import AgentTestStack, wait_for_agent_snapshot

from dex_agents_openai_agents import OpenAIAgentsRunner
from tests.agent_defs import INSTRUCTIONS, POLICIES, SCENARIO_ENV, STATE_DIR_ENV, build_tools
from tests.conftest import PACKAGE_DIR, final_answer, wait_idle

pytestmark = pytest.mark.skipif(
    not os.environ.get("OPENAI_API_KEY"), reason="OPENAI_API_KEY is not set"
)

LIVE_MODEL_ENV = "DEX_LIVE_OPENAI_MODEL"


def live_flow(state_dir: Path) -> AgentSessionFlow:
    agent = Agent(
        name="support-desk",
        instructions=INSTRUCTIONS + " Refund only when asked; always look the order up first.",
        model=os.environ.get(LIVE_MODEL_ENV, "gpt-4.1-mini"),
        tools=list(build_tools(state_dir, set())),
    )
    options = AgentSessionOptions(tool_policies=POLICIES)
    return AgentSessionFlow(OpenAIAgentsRunner(agent), flow_type="OpenAIDeskLive", options=options)


async def test_a_real_model_looks_up_and_refunds_after_approval(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    flow = live_flow(state_dir)
    env = {SCENARIO_ENV: "live", STATE_DIR_ENV: str(state_dir)}
    async with AgentTestStack(
        tmp_path, [flow], "tests.live_worker", worker_cwd=PACKAGE_DIR, worker_env=env
    ) as stack:
        sessions = stack.sessions(flow)
        await stack.start_worker()
        await sessions.start_session("live-1", "Order 7 arrived broken. Please refund $30.")

        def probe(snapshot: AgentSnapshot) -> AgentInterrupt | None:
            return next(iter(snapshot.pending_interrupts), None)

        interrupt = await wait_for_agent_snapshot(
            sessions, "live-1", probe, description="refund approval", timeout=120
        )
        assert interrupt.tool_name == "issue_refund"
        assert await sessions.resolve_interrupt("live-1", interrupt.interrupt_id, True)
        snapshot = await wait_idle(sessions, "live-1", turns=1, timeout=120)
        assert "30" in final_answer(snapshot)
        assert snapshot.usage.requests >= 2
