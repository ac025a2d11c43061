from __future__ import annotations

import asyncio

from dex_agents import MessageRole
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    FileGate,
    wait_for_agent_snapshot,
    wait_until,
)

from tests.agent_defs import FLAKY_MARKER
from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import ScenarioFactory


async def test_a_message_sent_during_a_turn_starts_the_next_turn(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("gated") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("queue-1", "look up order 7")
        gate = FileGate(s.state_dir, "lookup_order")
        await gate.wait_until_reached()

        assert await s.sessions.send_user_message("queue-1", "thanks, bye")
        await wait_for_agent_snapshot(
            s.sessions,
            "queue-1",
            lambda snapshot: snapshot.queued_message_count == 1,
            description="one queued message",
        )
        snapshot = await s.sessions.get_agent_snapshot("queue-1")
        assert snapshot.state is not None and snapshot.state.turn_count == 1
        gate.release()

        snapshot = await wait_idle(s.sessions, "queue-1", turns=2)
        texts = assistant_texts(snapshot)
        assert texts[-1] == "echo: thanks, bye"
        assert texts[-2].startswith("lookup_order#call-0-0: succeeded")
        assert [m.turn_id for m in snapshot.messages if m.text == "thanks, bye"] == ["turn-2"]


async def test_messages_sent_at_once_to_an_idle_session_each_get_their_own_turn(
    scenario: ScenarioFactory,
) -> None:
    # The first RPC to commit opens a turn itself; the others find it running and queue.
    async with scenario("router") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("queue-2")
        await wait_idle(s.sessions, "queue-2", turns=0)
        texts = [f"message {n}" for n in range(5)]
        accepted = await asyncio.gather(
            *(s.sessions.send_user_message("queue-2", text) for text in texts)
        )
        assert accepted == [True] * 5

        snapshot = await wait_idle(s.sessions, "queue-2", turns=5)
        assert snapshot.state is not None and snapshot.state.turn_count == 5
        users = [m for m in snapshot.messages if m.role is MessageRole.USER]
        assert sorted(m.text for m in users) == texts
        assert [m.turn_id for m in users] == [f"turn-{n}" for n in range(1, 6)]
        assert assistant_texts(snapshot) == [f"echo: {m.text}" for m in users]
        history = await s.stack.read_step_history("queue-2")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("RunModel") == 5


async def test_a_message_sent_while_await_user_message_holds_one_does_not_drop_it(
    scenario: ScenarioFactory,
) -> None:
    # A message queued during turn 1 is taken by AwaitUserMessage when the turn ends; the
    # runner fails its first attempt with it, so the Step holds the message (out of the
    # Channel) until its retry. A message sent meanwhile finds nothing queued and the
    # session not running, but must not take the idle path, whose cancel of
    # AwaitUserMessage would drop the held message.
    async with scenario("flaky_message") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("held-1", "look up order 7")
        gate = FileGate(s.state_dir, "lookup_order")
        await gate.wait_until_reached()
        assert await s.sessions.send_user_message("held-1", "flaky first")
        gate.release()

        marker = s.state_dir / FLAKY_MARKER
        await wait_until("AwaitUserMessage failing with the queued message", marker.exists)
        assert await s.sessions.send_user_message("held-1", "second")

        snapshot = await wait_idle(s.sessions, "held-1", turns=3)
        users = [m.text for m in snapshot.messages if m.role is MessageRole.USER]
        assert users == ["look up order 7", "flaky first", "second"]
        assert assistant_texts(snapshot)[-2:] == ["echo: flaky first", "echo: second"]
        assert snapshot.queued_message_count == 0


async def test_a_steer_held_by_await_user_message_is_not_dropped(
    scenario: ScenarioFactory,
) -> None:
    # With no turn running a steer starts the next turn through AwaitUserMessage, which
    # takes it from TurnControl and here fails once with it: a message sent meanwhile
    # must queue behind the steer instead of cancelling the Step that holds it.
    async with scenario("flaky_message") as s:
        await s.stack.start_worker()
        await s.sessions.start_session("held-2")
        await wait_idle(s.sessions, "held-2", turns=0)
        assert await s.sessions.steer_user_message("held-2", "flaky steer")
        marker = s.state_dir / FLAKY_MARKER
        await wait_until("AwaitUserMessage failing with the steer", marker.exists)
        assert await s.sessions.send_user_message("held-2", "second")

        snapshot = await wait_idle(s.sessions, "held-2", turns=2)
        users = [m.text for m in snapshot.messages if m.role is MessageRole.USER]
        assert users == ["flaky steer", "second"]
        assert assistant_texts(snapshot) == ["echo: flaky steer", "echo: second"]
