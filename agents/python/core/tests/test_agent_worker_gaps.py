"""An agent session whose Worker is down longer than a moment: calls wait for a Worker."""

from __future__ import annotations

import asyncio

from dex_agents.testing import wait_for_agent_snapshot

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_an_approval_sent_while_the_worker_is_down_waits_for_it(
    scenario: ScenarioFactory,
) -> None:
    """Fault: the session's only Worker is SIGKILLed; the user approves a pending tool call
    while no Worker runs (12 s, longer than the 10 s the server used to allow). Promise:
    ``resolve_interrupt`` (an RPC) waits for a Worker, up to its timeout, and succeeds."""
    async with scenario("router") as s:
        worker = await s.stack.start_worker()
        await s.sessions.start_session("gap-1", "refund order 7")
        snapshot = await wait_for_agent_snapshot(
            s.sessions,
            "gap-1",
            lambda snap: snap if snap.pending_interrupts else None,
            description="a pending approval",
        )
        interrupt = snapshot.pending_interrupts[0]

        worker.kill()
        call = asyncio.create_task(
            s.sessions.resolve_interrupt("gap-1", interrupt.interrupt_id, approved=True)
        )
        await asyncio.sleep(12.0)  # the scenario: the Worker is down for 12 s
        assert not call.done()
        await s.stack.start_worker()
        assert await asyncio.wait_for(call, 60)

        snapshot = await wait_idle(s.sessions, "gap-1", turns=1)
        assert assistant_texts(snapshot)[-1] == (
            "issue_refund#call-0-0: succeeded: refunded 30 on order 7"
        )
