from __future__ import annotations

from pathlib import Path

import pytest
from dex_agents import AgentSnapshot, MessageRole
from dex_agents.testing import AgentTestStack, InvocationLog, wait_until

from tests.live_agent import LOG_ENV, build_flow, live_model_name

pytestmark = pytest.mark.skipif(
    live_model_name() is None, reason="set OPENAI_API_KEY or ANTHROPIC_API_KEY for the live test"
)


async def test_live_model_calls_a_deferred_tool(tmp_path: Path) -> None:
    flow = build_flow()
    log = tmp_path / "calls.log"
    package_dir = Path(__file__).resolve().parents[1]
    async with AgentTestStack(
        tmp_path,
        [flow],
        "tests.live_agent",
        worker_cwd=package_dir,
        worker_env={LOG_ENV: str(log)},
    ) as stack:
        sessions = stack.sessions(flow)
        await stack.start_worker()
        await sessions.start_session("live-1", "What item is order 1042? Look it up.")

        # lookup_order is unclassified by default: approve each call the model makes.
        async def answered() -> AgentSnapshot | None:
            snap = await sessions.get_agent_snapshot("live-1")
            for interrupt in snap.pending_interrupts:
                assert interrupt.tool_name == "lookup_order"
                await sessions.resolve_interrupt("live-1", interrupt.interrupt_id, approved=True)
            state = snap.state
            if state is None or state.active_turn_id is not None or not snap.messages:
                return None
            return snap if snap.messages[-1].role is MessageRole.ASSISTANT else None

        snapshot = await wait_until("the live answer", answered, timeout=180, interval=0.5)
        assert "espresso" in snapshot.messages[-1].text.lower()
        assert InvocationLog(log).count("tool:lookup_order") >= 1
