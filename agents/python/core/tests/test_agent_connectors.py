"""The OpenAPI Connector end to end: a real HTTP service, Dex server and Worker children.

The service (``tests/connector_service.py``) counts requests and honours idempotency keys
on refunds; gates inside it pause a request after it was applied, before the answer, so
the Worker can be SIGKILLed mid-call. One service, server and Worker serve the whole module;
each test counts what the service did during the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
import pytest_asyncio
from dex_agents import AgentEventType, AgentSessionClient, AgentSnapshot
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    FileGate,
    find_dexcli,
    wait_for_agent_snapshot,
)
from dex_agents.testing._process import ChildProcess

from tests.agent_helpers import assistant_texts, wait_idle
from tests.connector_defs import BASE_URL_ENV, STATE_DIR_ENV, build_flow
from tests.connector_service import ADDRESS_FILE

PACKAGE_DIR = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.asyncio(loop_scope="module")


class Billing:
    """The module's billing service, Dex stack and sessions client (tests run in turn)."""

    def __init__(
        self,
        stack: AgentTestStack,
        sessions: AgentSessionClient,
        state_dir: Path,
        url: str,
        tmp_path: Path,
    ) -> None:
        self.stack = stack
        self.sessions = sessions
        self.state_dir = state_dir
        self.url = url
        self.tmp_path = tmp_path
        self._gates = itertools.count(1)

    async def stats(self) -> dict[str, Any]:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"{self.url}/_stats")
            response.raise_for_status()
            data: dict[str, Any] = response.json()
            return data

    async def arm(self, operation: str) -> FileGate:
        """Make the service hold the next request of ``operation`` at a fresh gate."""
        name = f"svc-{operation}-{next(self._gates)}"
        async with httpx.AsyncClient() as client:
            answer = await client.post(
                f"{self.url}/_gates", json={"operation": operation, "gate": name}
            )
            answer.raise_for_status()
        return FileGate(self.state_dir, name)

    async def crash_at(self, gate: FileGate) -> None:
        """Wait until the service holds a request at ``gate``, SIGKILL the Worker, restart."""
        await gate.wait_until_reached()
        for worker in list(self.stack._workers):
            if worker.is_running():
                worker.kill()
        gate.release()
        await self.stack.start_worker()


class Counters:
    """What the service did since it was created (the service is shared by the module)."""

    def __init__(self, before: dict[str, Any], after: dict[str, Any]) -> None:
        self.requests = {
            line: count - before["requests"].get(line, 0)
            for line, count in after["requests"].items()
            if count != before["requests"].get(line, 0)
        }
        self.applied = {
            kind: count - before["applied"][kind] for kind, count in after["applied"].items()
        }
        self.refund_keys = after["refund_keys"][len(before["refund_keys"]) :]


@contextlib.asynccontextmanager
async def counting(b: Billing) -> AsyncIterator[list[Counters]]:
    """``async with counting(b) as seen:`` then ``seen[0]`` holds the block's counters."""
    seen: list[Counters] = []
    before = await b.stats()
    yield seen
    seen.append(Counters(before, await b.stats()))


async def _wait_for_file(path: Path, process: ChildProcess, timeout: float = 15.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if not process.is_running():
            raise RuntimeError(f"the service exited:\n{process.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the service did not start:\n{process.log_tail()}")
        await asyncio.sleep(0.02)
    return path.read_text().strip()


@pytest.fixture(scope="module")
def token() -> str:
    return "sk-test-" + secrets.token_hex(16)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def billing(tmp_path_factory: pytest.TempPathFactory, token: str) -> AsyncIterator[Billing]:
    """One service, one Dex stack and one Worker for the module."""
    tmp_path = tmp_path_factory.mktemp("connectors")
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    service_env = {
        **os.environ,
        "SERVICE_TOKEN": token,
        "SERVICE_STATE_DIR": str(state_dir),
        "PYTHONPATH": str(PACKAGE_DIR),
    }
    service = ChildProcess(
        [sys.executable, "-m", "tests.connector_service"],
        log_path=tmp_path / "service.log",
        cwd=PACKAGE_DIR,
        env=service_env,
    )
    try:
        url = await _wait_for_file(state_dir / ADDRESS_FILE, service)
        worker_env = {STATE_DIR_ENV: str(state_dir), BASE_URL_ENV: url, "BILLING_BEARERAUTH": token}
        flow = build_flow(state_dir)
        async with AgentTestStack(
            tmp_path,
            [flow],
            "tests.connector_worker",
            worker_cwd=PACKAGE_DIR,
            worker_env=worker_env,
        ) as stack:
            await stack.start_worker()
            yield Billing(stack, stack.sessions(flow), state_dir, url, tmp_path)
    finally:
        await service.stop(timeout=5.0)


def last_answer(snapshot: AgentSnapshot) -> str:
    return assistant_texts(snapshot)[-1]


async def test_a_read_runs_with_the_credentials_and_its_schema(billing: Billing) -> None:
    b = billing
    async with counting(b) as seen:
        await b.sessions.start_session("read-1", "look up order 7")
        snapshot = await wait_idle(b.sessions, "read-1", turns=1)
    answer = last_answer(snapshot)
    assert answer.startswith("get_order: succeeded: ")
    assert '"status": "shipped"' in answer
    assert seen[0].requests == {"GET /orders/7": 1}


async def test_a_read_killed_mid_call_runs_again(billing: Billing) -> None:
    b = billing
    async with counting(b) as seen:
        gate = await b.arm("get_order")
        await b.sessions.start_session("read-crash", "look up order 7")
        await b.crash_at(gate)
        snapshot = await wait_idle(b.sessions, "read-crash", turns=1)
    assert last_answer(snapshot).startswith("get_order: succeeded: ")
    assert seen[0].requests == {"GET /orders/7": 2}
    history = await b.stack.read_step_history("read-crash")
    calls = [e for e in history if e.step_type == "CallTool"]
    assert [(e.event_type, e.final_attempt) for e in calls] == [(EXECUTE_COMPLETED_EVENT, 2)]


async def test_an_idempotent_post_repeats_with_the_same_key_and_applies_once(
    billing: Billing,
) -> None:
    b = billing
    async with counting(b) as seen:
        gate = await b.arm("create_refund")
        await b.sessions.start_session("refund-crash", "refund order 7")
        await b.crash_at(gate)
        snapshot = await wait_idle(b.sessions, "refund-crash", turns=1)

    key = "refund-crash/turn-1/call-0-0"
    assert seen[0].refund_keys == [key, key]
    assert seen[0].applied["refunds"] == 1
    answer = last_answer(snapshot)
    # The second attempt got the first attempt's answer back.
    assert answer.startswith("create_refund: succeeded: ")
    assert '"refund_id": "RF-' in answer
    # An idempotent write needs no approval: the session never waited for one.
    assert snapshot.pending_interrupts == []


async def test_a_non_idempotent_post_killed_after_its_start_never_repeats(
    billing: Billing,
) -> None:
    b = billing
    async with counting(b) as seen:
        gate = await b.arm("create_charge")
        await b.sessions.start_session("charge-crash", "charge order 7")
        interrupt = await wait_for_agent_snapshot(
            b.sessions,
            "charge-crash",
            lambda snapshot: next(iter(snapshot.pending_interrupts), None),
            description="the charge approval",
        )
        assert await b.sessions.resolve_interrupt("charge-crash", interrupt.interrupt_id, True)
        await b.crash_at(gate)
        snapshot = await wait_idle(b.sessions, "charge-crash", turns=1)

    assert seen[0].requests == {"POST /charges": 1}
    assert seen[0].applied["charges"] == 1
    assert last_answer(snapshot).startswith("create_charge: outcome_unknown: ")
    history = await b.stack.read_step_history("charge-crash")
    executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
    assert "CallSingleAttemptTool" not in executed
    assert executed.count("RecordToolOutcomeUnknown") == 1


async def test_http_errors_become_failures_the_model_sees_or_step_failures(
    billing: Billing,
) -> None:
    b = billing
    async with counting(b) as seen:
        # 404: a definite answer, one request, model-visible failure.
        await b.sessions.start_session("errors", "look up the missing order")
        snapshot = await wait_idle(b.sessions, "errors", turns=1)
        assert last_answer(snapshot).startswith(
            "get_order: failed: The tool call failed: GET /orders/{order_id}: HTTP 404 Not Found: "
        )
        # 503: a Step failure; a read is retried (3 attempts), then failed.
        assert await b.sessions.send_user_message("errors", "flaky please")
        snapshot = await wait_idle(b.sessions, "errors", turns=2, timeout=60)
    assert last_answer(snapshot).startswith("flaky_read: failed: ")
    assert "HTTP 503" in last_answer(snapshot)
    assert seen[0].requests == {"GET /orders/0": 1, "GET /flaky": 3}


async def _read_raw_history(address: str, flow_id: str) -> str:
    process = await asyncio.create_subprocess_exec(
        str(find_dexcli()),
        "--server",
        address,
        "--output",
        "json",
        "flow",
        "history",
        flow_id,
        "--all",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, stderr.decode(errors="replace")
    return stdout.decode()


async def _read_events(sessions: AgentSessionClient, session_id: str, turns: int) -> str:
    events: list[Any] = []

    async def collect() -> None:
        done = 0
        async for event in sessions.follow_events(session_id):
            events.append(event)
            if event.type is AgentEventType.TURN_COMPLETED:
                done += 1
                if done == turns:
                    return

    await asyncio.wait_for(collect(), timeout=30)
    assert len(events) > 0
    return msgspec.json.encode(events).decode()


async def test_the_secret_never_reaches_history_streams_events_or_logs(
    billing: Billing, token: str
) -> None:
    b = billing
    async with counting(b) as seen:
        # A read crashed mid-call and retried, a refund, an API that quotes the
        # credentials in a 400 answer, and one that quotes them in 503 answers.
        gate = await b.arm("get_order")
        await b.sessions.start_session("secret", "look up order 7")
        await b.crash_at(gate)
        await wait_idle(b.sessions, "secret", turns=1)
        assert await b.sessions.send_user_message("secret", "refund order 7")
        await wait_idle(b.sessions, "secret", turns=2)
        assert await b.sessions.send_user_message("secret", "echo the auth")
        snapshot = await wait_idle(b.sessions, "secret", turns=3)
        echo = last_answer(snapshot)
        # Step failures put their error detail in the history.
        assert await b.sessions.send_user_message("secret", "flaky please")
        await wait_idle(b.sessions, "secret", turns=4, timeout=60)
    assert seen[0].requests["GET /orders/7"] == 2

    assert echo.startswith(
        "echo_auth: failed: The tool call failed: POST /echo: HTTP 400 Bad Request: "
    )
    assert "Bearer [redacted]" in echo  # the service did quote it; the source scrubbed it
    texts = {
        "snapshot": msgspec.json.encode(await b.sessions.get_agent_snapshot("secret")).decode(),
        "history": await _read_raw_history(b.stack.server_address, "secret"),
        "events": await _read_events(b.sessions, "secret", turns=4),
    }
    for name, text in texts.items():
        assert token not in text, f"the secret appears in the {name}"
        # The service quoted the token in its answers: scrubbed, not absent.
        assert "Bearer [redacted]" in text, name

    # Every log and every file of the store (the SQLite file and its WAL), as they are.
    files = [p for p in b.tmp_path.rglob("*") if p.is_file() and p.name != "service.log"]
    logs = [p.name for p in files if p.suffix == ".log"]
    assert "dex-server.log" in logs
    assert sum(name.startswith("worker-") for name in logs) >= 2
    for path in files:
        assert token.encode() not in path.read_bytes(), f"the secret appears in {path}"
