"""An MCP server's tools in a LangGraph agent: effects, keys and questions, end to end."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSnapshot,
    InterruptKind,
    MessageRole,
    ToolEffect,
)
from dex_agents.testing import AgentTestStack, InvocationLog, wait_for_agent_snapshot

from tests.mcp_agent import build_flow
from tests.mcp_support import URL_ENV, mcp_http_server

PACKAGE_DIR = Path(__file__).resolve().parents[1]


async def first_event(sessions: AgentSessionClient, sid: str, kind: AgentEventType) -> AgentEvent:
    async with asyncio.timeout(30):
        async for event in sessions.follow_events(sid):
            if event.type is kind:
                return event
    raise AssertionError(f"no {kind} event")


def final_answer(snapshot: AgentSnapshot, turns: int) -> str | None:
    state = snapshot.state
    if state is None or state.turn_count < turns or state.active_turn_id is not None:
        return None
    texts = [m.text for m in snapshot.messages if m.role is MessageRole.ASSISTANT and m.text]
    return texts[-1] if texts else None


async def test_mcp_tools_run_in_a_langgraph_agent(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    async with mcp_http_server(state) as url:
        flow = await build_flow(url)
        async with AgentTestStack(
            tmp_path, [flow], "tests.mcp_agent", worker_cwd=PACKAGE_DIR, worker_env={URL_ENV: url}
        ) as stack:
            sessions = stack.sessions(flow)
            await stack.start_worker()
            await sessions.start_session("lg-mcp", "look up order 7")
            answer = await wait_for_agent_snapshot(
                sessions,
                "lg-mcp",
                lambda s: final_answer(s, 1),
                description="turn 1",
                timeout=60,
            )
            assert answer == "Result: order 7 has shipped"
            # readOnlyHint: a read, run without approval, with the key in _meta.
            deferred = await first_event(sessions, "lg-mcp", AgentEventType.TOOL_CALL_DEFERRED)
            assert deferred.data["effect"] == ToolEffect.READ
            assert deferred.data["requires_approval"] is False
            log = InvocationLog(state / "mcp_calls.log")
            assert (
                log.keys("mcp:lookup") == ["lg-mcp/turn-1/call-1-0-0"]
                or len(log.keys("mcp:lookup")) == 1
            )

            # The server's question becomes a question interrupt; the answer reaches it.
            await sessions.send_user_message("lg-mcp", "change the address")
            question = await wait_for_agent_snapshot(
                sessions,
                "lg-mcp",
                lambda s: next(
                    (i for i in s.pending_interrupts if i.kind is InterruptKind.QUESTION), None
                ),
                description="the address question",
                timeout=60,
            )
            assert question.question is not None
            assert question.question.message == "Where should order 7 go?"
            assert await sessions.resolve_interrupt(
                "lg-mcp", question.interrupt_id, True, answer={"street": "Elm 2", "city": "Rome"}
            )
            answer = await wait_for_agent_snapshot(
                sessions,
                "lg-mcp",
                lambda s: final_answer(s, 2),
                description="turn 2",
                timeout=60,
            )
            assert answer == "Result: order 7 goes to Elm 2, Rome"
