"""Steer and cancel at each boundary: during a model call, a tool call, an approval, idle.

The ``steer`` scenario passes a gate before every model call (``model-<turn>-<index>``)
and inside ``lookup_order`` (``lookup_order``); each test holds only the gates it needs.
"""

from __future__ import annotations

from pathlib import Path

from dex_agents import AgentInterrupt, AgentSnapshot, AgentStatus, MessageRole
from dex_agents.testing import MODEL_CALL_KIND, FileGate, tool_call_kind, wait_for_agent_snapshot

from tests.agent_helpers import assistant_texts, wait_idle
from tests.conftest import Scenario, ScenarioFactory

STOPPED_NOTE = "[Dex] The previous turn was {how} after these tool calls ran:"


def open_gates(state_dir: Path, *names: str) -> None:
    for name in names:
        FileGate(state_dir, name).release()


def model_gates(turns: int = 4) -> list[str]:
    return [f"model-turn-{t}-{i}" for t in range(1, turns + 1) for i in range(3)]


async def running(s: Scenario, session_id: str, status: AgentStatus) -> AgentSnapshot:
    return await wait_for_agent_snapshot(
        s.sessions,
        session_id,
        lambda snap: snap if snap.state is not None and snap.state.status is status else None,
        description=f"status {status}",
    )


async def pending_interrupt(s: Scenario, session_id: str) -> AgentInterrupt:
    return await wait_for_agent_snapshot(
        s.sessions,
        session_id,
        lambda snapshot: next(iter(snapshot.pending_interrupts), None),
        description="a pending approval",
    )


def user_texts(snapshot: AgentSnapshot) -> list[tuple[str, str]]:
    return [(m.turn_id, m.text) for m in snapshot.messages if m.role is MessageRole.USER]


# --------------------------------------------------------------------------- steer


async def test_steer_during_a_model_call_starts_the_next_turn(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        held = FileGate(s.state_dir, "model-turn-1-0")
        open_gates(s.state_dir, "lookup_order", *model_gates()[1:])
        await s.stack.start_worker()
        await s.sessions.start_session("steer-model", "look up order 7")
        await held.wait_until_reached()
        assert await s.sessions.steer_user_message("steer-model", "forget it, say hi")
        held.release()

        snapshot = await wait_idle(s.sessions, "steer-model", turns=2)
        assert assistant_texts(snapshot)[-1] == "echo: forget it, say hi"
        assert user_texts(snapshot)[-1] == ("turn-2", "forget it, say hi")
        # Turn 1 never got to its second model call.
        assert s.log.count(MODEL_CALL_KIND, "steer-model/turn-1/1") == 0
        assert s.log.count(tool_call_kind("lookup_order")) <= 1


async def test_steer_during_a_tool_call_lets_it_finish_and_notes_it(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("steer") as s:
        open_gates(s.state_dir, *model_gates())
        tool = FileGate(s.state_dir, "lookup_order")
        await s.stack.start_worker()
        await s.sessions.start_session("steer-tool", "look up order 7")
        await tool.wait_until_reached()
        assert await s.sessions.steer_user_message("steer-tool", "actually, never mind")
        tool.release()

        snapshot = await wait_idle(s.sessions, "steer-tool", turns=2)
        assert s.log.count(tool_call_kind("lookup_order")) == 1  # started, so it finished
        assert s.log.count(MODEL_CALL_KIND, "steer-tool/turn-1/1") == 0
        notes = [m.text for m in snapshot.messages if m.text.startswith("[Dex]")]
        assert len(notes) == 1
        assert notes[0].startswith(STOPPED_NOTE.format(how="steered"))
        assert "lookup_order" in notes[0] and "succeeded" in notes[0]
        assert assistant_texts(snapshot) == ["echo: actually, never mind"]
        assert user_texts(snapshot)[-1] == ("turn-2", "actually, never mind")


async def test_steer_during_an_approval_drops_the_call(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        open_gates(s.state_dir, *model_gates())
        await s.stack.start_worker()
        await s.sessions.start_session("steer-approval", "refund order 7")
        interrupt = await pending_interrupt(s, "steer-approval")
        assert await s.sessions.steer_user_message("steer-approval", "skip it, thanks")

        snapshot = await wait_idle(s.sessions, "steer-approval", turns=2)
        assert snapshot.pending_interrupts == []
        assert assistant_texts(snapshot)[-1] == "echo: skip it, thanks"
        assert not await s.sessions.resolve_interrupt(
            "steer-approval", interrupt.interrupt_id, approved=True
        )
        assert s.log.count(tool_call_kind("issue_refund")) == 0


async def test_steer_while_idle_starts_a_turn(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        open_gates(s.state_dir, *model_gates())
        await s.stack.start_worker()
        await s.sessions.start_session("steer-idle")
        await wait_idle(s.sessions, "steer-idle", turns=0)
        assert await s.sessions.steer_user_message("steer-idle", "hello")
        snapshot = await wait_idle(s.sessions, "steer-idle", turns=1)
        assert assistant_texts(snapshot) == ["echo: hello"]


# --------------------------------------------------------------------------- cancel


async def test_cancel_during_a_model_call_drops_its_answer(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        held = FileGate(s.state_dir, "model-turn-1-0")
        open_gates(s.state_dir, "lookup_order", *model_gates()[1:])
        await s.stack.start_worker()
        await s.sessions.start_session("cancel-model", "look up order 7")
        await held.wait_until_reached()
        assert await s.sessions.cancel_turn("cancel-model")

        snapshot = await wait_idle(s.sessions, "cancel-model", turns=1)
        held.release()  # too late: the call was stopped
        assert assistant_texts(snapshot) == []
        assert s.log.count(tool_call_kind("lookup_order")) == 0
        assert snapshot.state is not None and snapshot.state.turn_count == 1

        # No new turn starts until the next message, which works as usual.
        assert await s.sessions.send_user_message("cancel-model", "hi again")
        snapshot = await wait_idle(s.sessions, "cancel-model", turns=2)
        assert assistant_texts(snapshot) == ["echo: hi again"]


async def test_cancel_during_a_tool_call_records_it_and_ends_the_turn(
    scenario: ScenarioFactory,
) -> None:
    async with scenario("steer") as s:
        open_gates(s.state_dir, *model_gates())
        tool = FileGate(s.state_dir, "lookup_order")
        await s.stack.start_worker()
        await s.sessions.start_session("cancel-tool", "look up order 7")
        await tool.wait_until_reached()
        assert await s.sessions.cancel_turn("cancel-tool")
        tool.release()

        snapshot = await wait_idle(s.sessions, "cancel-tool", turns=1)
        assert s.log.count(tool_call_kind("lookup_order")) == 1
        assert s.log.count(MODEL_CALL_KIND, "cancel-tool/turn-1/1") == 0
        notes = [m.text for m in snapshot.messages if m.text.startswith("[Dex]")]
        assert len(notes) == 1 and notes[0].startswith(STOPPED_NOTE.format(how="cancelled"))
        assert snapshot.state is not None and snapshot.state.turn_count == 1


async def test_cancel_during_an_approval_cancels_the_call(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        open_gates(s.state_dir, *model_gates())
        await s.stack.start_worker()
        await s.sessions.start_session("cancel-approval", "refund order 7")
        interrupt = await pending_interrupt(s, "cancel-approval")
        assert await s.sessions.cancel_turn("cancel-approval")

        snapshot = await wait_idle(s.sessions, "cancel-approval", turns=1)
        assert snapshot.pending_interrupts == []
        assert snapshot.tool_calls == []
        assert not await s.sessions.resolve_interrupt(
            "cancel-approval", interrupt.interrupt_id, approved=True
        )
        assert s.log.count(tool_call_kind("issue_refund")) == 0
        assert snapshot.state is not None and snapshot.state.turn_count == 1


async def test_cancel_while_idle_does_nothing(scenario: ScenarioFactory) -> None:
    async with scenario("steer") as s:
        open_gates(s.state_dir, *model_gates())
        await s.stack.start_worker()
        await s.sessions.start_session("cancel-idle", "hello")
        before = await wait_idle(s.sessions, "cancel-idle", turns=1)
        assert not await s.sessions.cancel_turn("cancel-idle")
        after = await s.sessions.get_agent_snapshot("cancel-idle")
        assert after.state == before.state
        assert after.messages == before.messages
