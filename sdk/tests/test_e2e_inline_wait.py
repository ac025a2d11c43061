"""End to end: a scheduled Step's Wait computed inline by the scheduling Worker
(``StepOptions.wait_for_inline``), and its fall-back to a dispatched ``wait_for``.
Real server subprocess, real Worker child."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from dex import FlowStatus

from tests.e2e_flows import inline_wait_flows
from tests.e2e_flows.harness import (
    Stack,
    completed,
    e2e_stack,
    history,
    payload,
    unique_id,
    wait_for_phase,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLOW = inline_wait_flows.INLINE_WAITS


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-inline-wait")) as running:
        yield running


async def _waiting(stack: Stack, kind: str, step_type: str, tmp_path: Path) -> tuple[str, Path]:
    calls = tmp_path / f"{kind}.calls"
    flow_id = unique_id(f"inline-{kind}")
    await stack.client.start_flow(FLOW, flow_id, f"{kind}|{calls}")
    await wait_for_phase(stack.client, flow_id, step_type, "waiting")
    return flow_id, calls


@pytest.mark.parametrize(
    ("kind", "step_type"),
    [("async", "AsyncWaiter"), ("sync", "SyncWaiter"), ("plain", "PlainWaiter")],
)
async def test_an_inline_wait_commits_with_the_decision_and_runs_once(
    stack: Stack, tmp_path: Path, kind: str, step_type: str
) -> None:
    flow_id, calls = await _waiting(stack, kind, step_type, tmp_path)

    events = await history(stack.client, flow_id)
    scheduled = next(e for e in events if completed("Schedule-1")(e))
    waited = [e for e in events if e.type == "StepWaitForCompleted"]
    assert len(waited) == 1
    body = payload(waited[0])
    assert body["context"]["stepExecutionId"] == f"{step_type}-1"
    assert body["context"]["finalAttempt"] == 1
    assert body["output"]["inline"] is True
    assert body["output"]["wait"]["conditions"][0]["channel"] == "inline_ping"
    # recorded by the same transaction as the decision that scheduled it
    assert waited[0].event_time == scheduled.event_time
    assert waited[0].event_id == scheduled.event_id + 1
    # the Worker ran the wait_for once: no task of its own followed
    assert calls.read_text().split() == [kind]

    await stack.client.invoke_rpc(FLOW.ping, flow_id, "hello")
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "hello"


async def test_a_wait_for_that_reads_its_context_is_dispatched_as_usual(
    stack: Stack, tmp_path: Path
) -> None:
    flow_id, calls = await _waiting(stack, "touchy", "TouchyWaiter", tmp_path)

    events = await history(stack.client, flow_id)
    scheduled = next(e for e in events if completed("Schedule-1")(e))
    [waited] = [e for e in events if e.type == "StepWaitForCompleted"]
    assert "inline" not in payload(waited)["output"]
    assert waited.event_time > scheduled.event_time
    # tried inline (stopped at its first use of the context), then run as its own task
    assert calls.read_text().split() == ["touchy", "touchy"]

    await stack.client.invoke_rpc(FLOW.ping, flow_id, "late")
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(str) == "late"


async def test_an_inline_wait_takes_a_message_queued_before_it_at_once(
    stack: Stack, tmp_path: Path
) -> None:
    # Hold's execute consumes the gate message and publishes nothing; the Wait it records
    # inline for AsyncWaiter must still match the ping queued earlier, in that commit.
    flow_id, calls = await _waiting(stack, "queued", "Hold", tmp_path)
    await stack.client.invoke_rpc(FLOW.ping, flow_id, "queued")
    await stack.client.invoke_rpc(FLOW.open_gate, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "queued"
    events = await history(stack.client, flow_id)
    held = next(e for e in events if completed("Hold-1")(e))
    [waited] = [
        e
        for e in events
        if e.type == "StepWaitForCompleted"
        and payload(e)["context"]["stepExecutionId"] == "AsyncWaiter-1"
    ]
    assert payload(waited)["output"]["inline"] is True
    assert waited.event_time == held.event_time
    assert calls.read_text().split() == ["async"]
