"""An OpenAPI Connector's operation in a Pydantic AI agent: a real local HTTP service child
(the core tests' billing service), a real Dex server and a Worker child.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from adapter_checks.mcp import final_answer, first_event
from dex_agents import AgentEventType, ToolCallStatus, ToolEffect
from dex_agents.testing import AgentTestStack, wait_for_agent_snapshot
from dex_agents.testing._process import ChildProcess

from tests.connector_agent import BASE_URL_ENV, build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]
SERVICE_SCRIPT = PACKAGE_DIR.parent / "core" / "tests" / "connector_service.py"


async def _service_url(state_dir: Path, service: ChildProcess) -> str:
    address = state_dir / "service.address"
    deadline = time.monotonic() + 30
    while not address.exists():
        if not service.is_running() or time.monotonic() > deadline:
            raise AssertionError(f"the service did not start:\n{service.log_tail()}")
        await asyncio.sleep(0.05)
    return address.read_text().strip()


def _stats(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url + "/_stats", timeout=10) as answer:
        stats: dict[str, Any] = json.loads(answer.read())
    return stats


async def test_an_idempotent_post_runs_as_its_own_tool_step_with_the_key(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    token = "sk-test-" + secrets.token_hex(8)
    service = ChildProcess(
        [sys.executable, str(SERVICE_SCRIPT)],
        log_path=tmp_path / "service.log",
        env={**os.environ, "SERVICE_TOKEN": token, "SERVICE_STATE_DIR": str(state)},
    )
    try:
        url = await _service_url(state, service)
        flow = await build_flow()
        worker_env = {BASE_URL_ENV: url, "REFUNDS_BEARERAUTH": token}
        async with AgentTestStack(
            tmp_path,
            [flow],
            "tests.connector_agent",
            worker_cwd=PACKAGE_DIR,
            worker_env=worker_env,
        ) as stack:
            sessions = stack.sessions(flow)
            await stack.start_worker()
            await sessions.start_session("pa-connector", "refund order 7")
            answer = await wait_for_agent_snapshot(
                sessions,
                "pa-connector",
                lambda s: final_answer(s, 1),
                description="turn 1",
                timeout=60,
            )
            assert "RF-1" in answer
            # a POST that honours Idempotency-Key: idempotent_write, no approval, a tool Step
            deferred = await first_event(
                sessions, "pa-connector", AgentEventType.TOOL_CALL_DEFERRED
            )
            assert deferred.data["effect"] == ToolEffect.IDEMPOTENT_WRITE
            assert deferred.data["requires_approval"] is False
            finished = await first_event(
                sessions, "pa-connector", AgentEventType.TOOL_CALL_FINISHED
            )
            call_id = deferred.data["tool_call_id"]
            assert finished.data["tool_call_id"] == call_id
            assert finished.data["status"] == ToolCallStatus.SUCCEEDED
            # the Step's key, "<session>/<turn>/<call>", reached the service as the header
            key = f"pa-connector/turn-1/{call_id}"
            stats = await asyncio.to_thread(_stats, url)
            assert stats["refund_keys"] == [key]
            assert stats["applied"]["refunds"] == 1
    finally:
        await service.stop(timeout=5.0)
