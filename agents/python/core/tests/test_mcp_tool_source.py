"""MCPToolSource end to end: real MCP server processes, a real server, Worker children."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest
from dex_agents import (
    AgentInterrupt,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSessionOptions,
    InterruptKind,
    MCPToolSource,
    ToolEffect,
    ToolPolicy,
)
from dex_agents._tool_input import SINGLE_ATTEMPT_QUESTION_ERROR
from dex_agents._tool_steps import EXPIRED_QUESTION
from dex_agents.testing import AgentTestStack, FileGate, InvocationLog, wait_for_agent_snapshot
from dex_agents.testing._process import ChildProcess

from tests.agent_helpers import assistant_texts, wait_idle
from tests.mcp_defs import (
    PACKAGE_DIR,
    STATE_DIR_ENV,
    STDIO_GATES_ENV,
    URL_ENV,
    build_flows,
    stdio_source,
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def mcp_http_server(state_dir: Path, gates: str) -> AsyncIterator[str]:
    """Start ``tests.mcp_server`` over streamable HTTP; yield its URL once it lists tools."""
    port = _free_port()
    env = {
        **os.environ,
        "MCP_TEST_STATE_DIR": str(state_dir),
        "MCP_TEST_GATES": gates,
        "PYTHONPATH": str(PACKAGE_DIR),
    }
    child = ChildProcess(
        [sys.executable, "-m", "tests.mcp_server", "http", str(port)],
        log_path=state_dir / "mcp_http.log",
        cwd=PACKAGE_DIR,
        env=env,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
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


class McpScenario:
    def __init__(self, stack: AgentTestStack, flows: list[AgentSessionFlow], state: Path) -> None:
        self.stack = stack
        self.state_dir = state
        self.http = stack.sessions(flows[0])
        self.stdio = stack.sessions(flows[1])
        self.deadline = stack.sessions(flows[2])
        self.log = InvocationLog(state / "mcp_calls.log")

    def keys(self, tool: str) -> list[str]:
        return self.log.keys(f"mcp:{tool}")


McpFactory = Callable[..., AbstractAsyncContextManager[McpScenario]]


@pytest.fixture
def mcp_scenario(tmp_path: Path) -> McpFactory:
    @asynccontextmanager
    async def start(*, http_gates: str = "", stdio_gates: str = "") -> AsyncIterator[McpScenario]:
        state = tmp_path / "state"
        state.mkdir(exist_ok=True)
        async with mcp_http_server(state, http_gates) as url:
            flows = build_flows(state, url, stdio_gates)
            env = {STATE_DIR_ENV: str(state), URL_ENV: url, STDIO_GATES_ENV: stdio_gates}
            async with AgentTestStack(
                tmp_path, flows, "tests.mcp_worker", worker_cwd=PACKAGE_DIR, worker_env=env
            ) as stack:
                yield McpScenario(stack, flows, state)

    return start


async def crash_at(
    s: McpScenario, sessions: AgentSessionClient, sid: str, text: str, gate: str
) -> None:
    worker = await s.stack.start_worker()
    await sessions.start_session(sid, text)
    mark = FileGate(s.state_dir, gate)
    await mark.wait_until_reached(timeout=60)
    worker.kill()
    mark.release()
    await s.stack.start_worker()


async def first_interrupt(
    sessions: AgentSessionClient, sid: str, kind: InterruptKind
) -> AgentInterrupt:
    return await wait_for_agent_snapshot(
        sessions,
        sid,
        lambda snap: next((i for i in snap.pending_interrupts if i.kind is kind), None),
        description=f"a {kind} interrupt",
        timeout=60,
    )


async def test_tools_and_effects_come_from_the_annotations(tmp_path: Path) -> None:
    source = stdio_source(tmp_path, "")
    tools = {t.name: t for t in await source.list_tools()}
    assert tools["lookup"].effect is ToolEffect.READ
    assert tools["set_status"].effect is ToolEffect.IDEMPOTENT_WRITE
    assert tools["refund"].effect is None
    assert tools["lookup"].input_schema["required"] == ["order_id"]
    assert tools["lookup"].description == "Look up an order's status."
    # An explicit policy wins over the annotation; without one the annotation decides.
    options = AgentSessionOptions(tool_policies={"lookup": ToolPolicy(ToolEffect.UNCLASSIFIED)})
    assert options.resolve_tool_policy("lookup", tools["lookup"].effect).effect is (
        ToolEffect.UNCLASSIFIED
    )
    assert options.resolve_tool_policy("refund", tools["refund"].effect).effect is (
        ToolEffect.UNCLASSIFIED
    )
    assert options.resolve_tool_policy("set_status", tools["set_status"].effect).effect is (
        ToolEffect.IDEMPOTENT_WRITE
    )
    named = MCPToolSource(source._server, include={"lookup"}, prefix="orders_")
    assert [t.name for t in await named.list_tools()] == ["orders_lookup"]


async def test_a_read_over_stdio_runs_again_after_a_crash(mcp_scenario: McpFactory) -> None:
    async with mcp_scenario(stdio_gates="lookup") as s:
        await crash_at(s, s.stdio, "mcp-read", "look up order 7", "mcp-lookup")
        snapshot = await wait_idle(s.stdio, "mcp-read", turns=1, timeout=90)
        key = "mcp-read/turn-1/call-0-0"
        assert s.keys("lookup") == [key, key]
        assert assistant_texts(snapshot)[-1] == "lookup: succeeded: order 7 has shipped"


async def test_an_idempotent_write_repeats_with_the_same_key(mcp_scenario: McpFactory) -> None:
    async with mcp_scenario(http_gates="set_status") as s:
        await crash_at(s, s.http, "mcp-write", "hold the status", "mcp-set_status")
        snapshot = await wait_idle(s.http, "mcp-write", turns=1, timeout=90)
        key = "mcp-write/turn-1/call-0-0"
        assert s.keys("set_status") == [key, key]
        # The server applied the key once, whichever request got there first.
        assert (s.state_dir / "applied.txt").read_text().splitlines() == [key]
        assert assistant_texts(snapshot)[-1].startswith("set_status: succeeded: order 7 ")


async def test_a_non_idempotent_call_is_never_repeated(mcp_scenario: McpFactory) -> None:
    async with mcp_scenario(http_gates="refund") as s:
        worker = await s.stack.start_worker()
        await s.http.start_session("mcp-refund", "refund order 7")
        # No annotation: the default (unclassified) applies, so it needs approval.
        approval = await first_interrupt(s.http, "mcp-refund", InterruptKind.APPROVAL)
        assert await s.http.resolve_interrupt("mcp-refund", approval.interrupt_id, True)
        gate = FileGate(s.state_dir, "mcp-refund")
        await gate.wait_until_reached(timeout=60)
        worker.kill()
        gate.release()
        await s.stack.start_worker()
        snapshot = await wait_idle(s.http, "mcp-refund", turns=1, timeout=90)
        assert s.keys("refund") == ["mcp-refund/turn-1/call-0-0"]
        assert assistant_texts(snapshot)[-1].startswith("refund: outcome_unknown: ")


async def test_a_question_waits_across_a_worker_restart(mcp_scenario: McpFactory) -> None:
    async with mcp_scenario() as s:
        worker = await s.stack.start_worker()
        await s.http.start_session("mcp-ask", "change the address")
        question = await first_interrupt(s.http, "mcp-ask", InterruptKind.QUESTION)
        assert question.question is not None
        assert question.question.message == "Where should order 7 go?"
        assert question.question.requested_schema is not None
        assert set(question.question.requested_schema["properties"]) == {"street", "city"}
        assert s.keys("change_address") == []
        # The Worker goes away while the question waits; a new one takes the answer.
        worker.kill()
        await s.stack.start_worker()
        answer = {"street": "1 Main St", "city": "Oslo"}
        assert await s.http.resolve_interrupt("mcp-ask", question.interrupt_id, True, answer=answer)
        snapshot = await wait_idle(s.http, "mcp-ask", turns=1, timeout=90)
        assert assistant_texts(snapshot)[-1] == (
            "change_address: succeeded: order 7 goes to 1 Main St, Oslo"
        )
        assert s.keys("change_address") == ["mcp-ask/turn-1/call-0-0"]
        assert snapshot.pending_interrupts == []

        # Declining is an answer too: the server hears "decline".
        await s.http.send_user_message("mcp-ask", "change the address again")
        second = await first_interrupt(s.http, "mcp-ask", InterruptKind.QUESTION)
        assert await s.http.resolve_interrupt("mcp-ask", second.interrupt_id, False)
        snapshot = await wait_idle(s.http, "mcp-ask", turns=2, timeout=90)
        assert assistant_texts(snapshot)[-1].endswith("chose not to give an address (decline)")


async def test_a_single_attempt_call_cannot_ask(mcp_scenario: McpFactory) -> None:
    async with mcp_scenario() as s:
        await s.stack.start_worker()
        await s.http.start_session("mcp-cancel", "cancel order 7")
        approval = await first_interrupt(s.http, "mcp-cancel", InterruptKind.APPROVAL)
        assert await s.http.resolve_interrupt("mcp-cancel", approval.interrupt_id, True)
        snapshot = await wait_idle(s.http, "mcp-cancel", turns=1, timeout=90)
        answer = assistant_texts(snapshot)[-1]
        assert answer.startswith("cancel_order: failed: ")
        assert answer.endswith(SINGLE_ATTEMPT_QUESTION_ERROR)
        assert s.keys("cancel_order") == []
        # A tool error reaches the model as a failed call.
        await s.http.send_user_message("mcp-cancel", "broken tool")
        approval = await first_interrupt(s.http, "mcp-cancel", InterruptKind.APPROVAL)
        assert await s.http.resolve_interrupt("mcp-cancel", approval.interrupt_id, True)
        snapshot = await wait_idle(s.http, "mcp-cancel", turns=2, timeout=90)
        assert "the warehouse is closed" in assistant_texts(snapshot)[-1]


async def test_an_unanswered_question_expires_at_its_deadline(mcp_scenario: McpFactory) -> None:
    async with mcp_scenario() as s:
        await s.stack.start_worker()
        await s.deadline.start_session("mcp-late", "change the address")
        question = await first_interrupt(s.deadline, "mcp-late", InterruptKind.QUESTION)
        assert question.deadline is not None
        snapshot = await wait_idle(s.deadline, "mcp-late", turns=1, timeout=90)
        answer = assistant_texts(snapshot)[-1]
        assert answer.startswith("change_address: rejected: ")
        assert answer.endswith(EXPIRED_QUESTION)
        assert s.keys("change_address") == []
        assert not await s.deadline.resolve_interrupt(
            "mcp-late", question.interrupt_id, True, answer={"street": "x", "city": "y"}
        )
