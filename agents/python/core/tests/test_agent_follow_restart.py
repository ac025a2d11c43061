"""A session's follower across a server restart (a deploy): it resumes, and skips nothing new."""

from __future__ import annotations

import asyncio

from dex_agents import AgentEvent, AgentEventType
from dex_agents.testing import wait_for_agent_snapshot

from tests.agent_helpers import wait_idle
from tests.conftest import ScenarioFactory


async def test_a_follower_rides_out_a_server_restart(scenario: ScenarioFactory) -> None:
    async with scenario("router") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("follow-1", "hello there")
        events: list[AgentEvent] = []
        first_done = asyncio.Event()

        async def follow() -> None:
            async for event in s.sessions.follow_events("follow-1"):
                events.append(event)
                if event.type is AgentEventType.TURN_COMPLETED:
                    if event.turn_id == "turn-1":
                        first_done.set()
                    else:
                        return

        follower = asyncio.create_task(follow())
        await asyncio.wait_for(first_done.wait(), timeout=30)
        await wait_idle(s.sessions, "follow-1", turns=1)

        await s.stack.restart_server()
        # the Worker reconnects on its own; the session answers again once it has
        await wait_for_agent_snapshot(
            s.sessions,
            "follow-1",
            lambda snapshot: snapshot if snapshot.state is not None else None,
            description="the session after the restart",
            timeout=30,
        )
        assert await s.sessions.send_user_message("follow-1", "and again")
        await asyncio.wait_for(follower, timeout=30)

        second = [e for e in events if e.turn_id == "turn-2"]
        kinds = [e.type for e in second]
        # every event of the new turn arrived, from its start: none fell below the token
        # the follower held from before the restart
        assert kinds[0] is AgentEventType.TURN_STARTED, kinds
        assert kinds[-1] is AgentEventType.TURN_COMPLETED, kinds
        assert AgentEventType.USAGE_RECORDED in kinds, kinds
        assert [e.turn_id for e in events[: events.index(second[0])]] == ["turn-1"] * (
            events.index(second[0])
        )
        await wait_idle(s.sessions, "follow-1", turns=2)
