"""An agent Flow with a Flow-level ``FlowConfig(step_durability=ASYNC)``.

Every session Step sets SYNC durability on both of its methods, so such a config must
never replay a Step: each model call and each tool call still runs exactly once.
"""

from __future__ import annotations

from pathlib import Path

import dex
import pytest
from dex_agents import AgentSessionFlow, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, AgentTestStack, InvocationLog

from tests.agent_helpers import wait_idle
from tests.my_agent import LOG_NAME, MyFrameworkRunner, build_agent

PACKAGE_DIR = Path(__file__).resolve().parents[1]


def test_a_config_that_is_not_a_flow_config_is_refused() -> None:
    with pytest.raises(TypeError, match="FlowConfig"):
        AgentSessionFlow(
            MyFrameworkRunner(build_agent()),
            config={"step_durability": "async"},  # type: ignore[arg-type]
        )


def test_without_a_config_sessions_start_with_the_server_defaults() -> None:
    flow = AgentSessionFlow(MyFrameworkRunner(build_agent()))
    assert flow.config is None
    assert flow.start_flow_options() == dex.StartFlowOptions()


async def test_an_async_flow_config_replays_no_step(tmp_path: Path) -> None:
    from dex import FlowConfig, StepDurability

    config = FlowConfig(step_durability=StepDurability.ASYNC)
    flow = AgentSessionFlow(
        MyFrameworkRunner(build_agent()),
        flow_type="TriageAgent",
        options=AgentSessionOptions(
            tool_policies={"search_tickets": ToolPolicy(ToolEffect.READ)},
        ),
        config=config,
    )
    assert flow.config is config
    assert getattr(flow.start_flow_options(), "config_override", None) is config
    async with AgentTestStack(
        tmp_path,
        [flow],
        "tests.my_worker",
        worker_cwd=PACKAGE_DIR,
        worker_env={"MY_STATE_DIR": str(tmp_path)},
    ) as stack:
        sessions = stack.sessions(flow)
        await stack.start_worker()
        await sessions.start_session("config-1", "Find my open tickets")
        snapshot = await wait_idle(sessions, "config-1", turns=1)
        assert snapshot.messages[-1].text == "search_tickets: succeeded: 3 open tickets for me"
        executed = [
            e.step_type
            for e in await stack.read_step_history("config-1")
            if e.event_type == EXECUTE_COMPLETED_EVENT
        ]
        assert executed == ["StartAgentSession", "RunModel", "CallTool", "ResumeTurn", "RunModel"]
        log = InvocationLog(tmp_path / LOG_NAME)
        assert log.count("model") == 2
        assert log.count("tool:search_tickets") == 1
