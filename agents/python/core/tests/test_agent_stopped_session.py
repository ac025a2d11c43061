from __future__ import annotations

import pytest
from dex.errors import FlowNotActiveOrNotFoundError

from tests.agent_helpers import wait_idle
from tests.conftest import ScenarioFactory


async def test_a_stopped_session_stays_readable_within_retention(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("history") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("stopped-1", "one")
        await wait_idle(s.sessions, "stopped-1", turns=1)
        assert await s.sessions.send_user_message("stopped-1", "two")
        before = await wait_idle(s.sessions, "stopped-1", turns=2)

        await s.sessions.stop_session("stopped-1")
        info = await s.stack.client.describe_flow("stopped-1")
        assert info.status.value != "running"

        after = await s.sessions.get_agent_snapshot("stopped-1")
        assert after.messages == before.messages
        assert after.state == before.state
        assert after.usage == before.usage

        page = await s.sessions.list_agent_messages("stopped-1", after_sequence=1, limit=2)
        assert [m.sequence for m in page.messages] == [2, 3]
        assert page.next_after_sequence == 3
        page = await s.sessions.list_agent_messages("stopped-1", after_sequence=3, limit=0)
        assert [m.sequence for m in page.messages] == [4]  # limit clamped to 1

        with pytest.raises(FlowNotActiveOrNotFoundError):
            await s.sessions.send_user_message("stopped-1", "three")
