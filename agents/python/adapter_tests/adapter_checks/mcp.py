"""The MCP check every adapter runs: the core test MCP server over HTTP, in an agent.

Each adapter's ``tests/mcp_agent.py`` builds its framework's agent from the server's tools
(``source_tools``); :func:`check_mcp_agent` then runs it as a durable session.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSnapshot,
    InterruptKind,
    MCPToolSource,
    MessageRole,
    ToolEffect,
)
from dex_agents.testing import AgentTestStack, InvocationLog, wait_for_agent_snapshot
from dex_agents.testing._process import ChildProcess

SERVER_SCRIPT = Path(__file__).resolve().parents[2] / "core" / "tests" / "mcp_server.py"
URL_ENV = "MCP_TEST_URL"
STATE_DIR_ENV = "MCP_TEST_STATE_DIR"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def mcp_http_server(state_dir: Path) -> AsyncIterator[str]:
    """Run the server as a child process; yield its URL once it lists its tools."""
    port = _free_port()
    env = {**os.environ, STATE_DIR_ENV: str(state_dir)}
    child = ChildProcess(
        [sys.executable, str(SERVER_SCRIPT), "http", str(port)],
        log_path=state_dir / "mcp_http.log",
        env=env,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            try:
                await MCPToolSource.http(url, read_timeout_seconds=5).list_tools()
                break
            except Exception:
                if loop.time() > deadline or not child.is_running():
                    raise AssertionError(child.log_tail()) from None
                await asyncio.sleep(0.2)
        yield url
    finally:
        await child.stop()


async def first_event(sessions: AgentSessionClient, sid: str, kind: AgentEventType) -> AgentEvent:
    """The session's first event of ``kind`` (within 30 s)."""
    async with asyncio.timeout(30):
        async for event in sessions.follow_events(sid):
            if event.type is kind:
                return event
    raise AssertionError(f"no {kind} event")


def final_answer(snapshot: AgentSnapshot, turns: int) -> str | None:
    """The last assistant text once ``turns`` turns ended, else None."""
    state = snapshot.state
    if state is None or state.turn_count < turns or state.active_turn_id is not None:
        return None
    texts = [m.text for m in snapshot.messages if m.role is MessageRole.ASSISTANT and m.text]
    return texts[-1] if texts else None


async def check_mcp_agent(
    tmp_path: Path,
    build_flow: Callable[[str], Awaitable[AgentSessionFlow]],
    package_dir: Path,
    sid: str,
) -> None:
    """Run the adapter's MCP agent (module ``tests.mcp_agent``) through a read and a question."""
    state = tmp_path / "state"
    state.mkdir()
    async with mcp_http_server(state) as url:
        flow = await build_flow(url)
        async with AgentTestStack(
            tmp_path, [flow], "tests.mcp_agent", worker_cwd=package_dir, worker_env={URL_ENV: url}
        ) as stack:
            sessions = stack.sessions(flow)
            await stack.start_worker()
            await sessions.start_session(sid, "look up order 7")
            answer = await wait_for_agent_snapshot(
                sessions,
                sid,
                lambda s: final_answer(s, 1),
                description="turn 1",
                timeout=60,
            )
            assert answer == "Result: order 7 has shipped"
            # readOnlyHint: a read, run without approval, with the key in _meta.
            deferred = await first_event(sessions, sid, AgentEventType.TOOL_CALL_DEFERRED)
            assert deferred.data["effect"] == ToolEffect.READ
            assert deferred.data["requires_approval"] is False
            log = InvocationLog(state / "mcp_calls.log")
            assert (
                log.keys("mcp:lookup") == [f"{sid}/turn-1/call-1-0-0"]
                or len(log.keys("mcp:lookup")) == 1
            )

            # The server's question becomes a question interrupt; the answer reaches it.
            await sessions.send_user_message(sid, "change the address")
            question = await wait_for_agent_snapshot(
                sessions,
                sid,
                lambda s: next(
                    (i for i in s.pending_interrupts if i.kind is InterruptKind.QUESTION), None
                ),
                description="the address question",
                timeout=60,
            )
            assert question.question is not None
            assert question.question.message == "Where should order 7 go?"
            assert await sessions.resolve_interrupt(
                sid, question.interrupt_id, True, answer={"street": "Elm 2", "city": "Rome"}
            )
            answer = await wait_for_agent_snapshot(
                sessions,
                sid,
                lambda s: final_answer(s, 2),
                description="turn 2",
                timeout=60,
            )
            assert answer == "Result: order 7 goes to Elm 2, Rome"
