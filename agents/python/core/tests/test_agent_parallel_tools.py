from __future__ import annotations

import json

from dex_agents.testing import EXECUTE_COMPLETED_EVENT, FileGate, tool_call_kind

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_tool_calls_of_one_response_run_in_parallel_steps(scenario: ScenarioFactory) -> None:
    async with scenario("gated") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("parallel-1", "read in parallel please")

        # Both tool Steps are inside their tool at the same time: neither gate is released.
        first = FileGate(s.state_dir, "slow-call-0-0")
        second = FileGate(s.state_dir, "slow-call-0-1")
        await first.wait_until_reached()
        await second.wait_until_reached()
        first.release()
        second.release()

        snapshot = await wait_idle(s.sessions, "parallel-1", turns=1)
        assert assistant_texts(snapshot)[-1] == (
            "slow_read#call-0-0: succeeded: value of a\nslow_read#call-0-1: succeeded: value of b"
        )
        assert s.log.count(tool_call_kind("slow_read")) == 2

        history = await s.stack.read_step_history("parallel-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("CallTool") == 2
        assert executed.count("ResumeTurn") == 1
        assert executed.count("RunModel") == 2
        # One Worker ran both tool Steps and ResumeTurn's wait_for: it ran ResumeTurn's
        # execute when it sent the last result, and the server took it in that commit.
        page = await s.stack.client.get_history("parallel-1", page_size=1000)
        resumed = [
            json.loads(bytes(e.payload))
            for e in page.events
            if e.type == "StepExecuteCompleted" and b'"stepType":"ResumeTurn"' in bytes(e.payload)
        ]
        assert [r["output"].get("inline") for r in resumed] == [True]
        # The turn's stored items: assistant text, two requests, two results, the answer.
        roles = [m.role.value for m in snapshot.messages]
        assert roles == ["user", "assistant", "assistant", "assistant", "tool", "tool", "assistant"]
