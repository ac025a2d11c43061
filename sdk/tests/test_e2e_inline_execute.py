"""End to end: a waiting Step's ``execute`` run by the Worker that delivers the result
satisfying its Wait (``StepOptions.execute_inline``), and its fall-backs to a dispatched
``execute``. Real server subprocess, real Worker child."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from dex import FlowStatus
from dex._protocol import HistoryEventWire

from tests.e2e_flows import inline_execute_flows
from tests.e2e_flows.harness import Stack, completed, e2e_stack, history, payload, unique_id

pytestmark = pytest.mark.asyncio(loop_scope="module")

FLOW = inline_execute_flows.INLINE_EXECUTES


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-inline-execute")) as running:
        yield running


async def _run(
    stack: Stack, mode: str, tmp_path: Path
) -> tuple[list[HistoryEventWire], list[str], str]:
    """Run the Flow in ``mode``: its history, Gather's execute runs, and its output."""
    calls = tmp_path / f"{mode}.calls"
    flow_id = unique_id(f"inline-execute-{mode}")
    await stack.client.start_flow(FLOW, flow_id, f"{mode}|{calls}")
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED
    return (
        await history(stack.client, flow_id),
        calls.read_text().split(),
        result.single_output(str),
    )


async def test_the_execute_commits_with_the_result_that_satisfies_its_wait(
    stack: Stack, tmp_path: Path
) -> None:
    events, runs, output = await _run(stack, "plain", tmp_path)

    assert output == "r-a,r-b|a=6,b=6"
    position = next(i for i, e in enumerate(events) if completed("Gather-1")(e))
    gathered = events[position]
    assert payload(gathered)["output"]["inline"] is True
    # recorded by the transaction of the result that satisfied the Wait (one `now`), and
    # the Worker ran the method once: no task of its own followed
    assert events[position - 1].event_time == gathered.event_time
    assert runs == ["execute"]


async def test_a_wait_the_worker_did_not_see_whole_dispatches_the_execute(
    stack: Stack, tmp_path: Path
) -> None:
    # Fan's own message was in the Channel before Gather waited: the Worker does not try
    events, runs, output = await _run(stack, "busy", tmp_path)

    assert output.startswith("early,r-")
    [gathered] = [e for e in events if completed("Gather-1")(e)]
    assert "inline" not in payload(gathered)["output"]
    assert runs == ["execute"]


async def test_a_snapshot_the_server_builds_otherwise_dispatches_the_execute(
    stack: Stack, tmp_path: Path
) -> None:
    # the records are over blob_threshold_bytes: the server's task holds them as blobs,
    # the Worker's inline guess inline, so the digests differ and the server refuses it
    events, runs, output = await _run(stack, "big", tmp_path)

    assert output == "r-a,r-b|a=3006,b=3006"
    [gathered] = [e for e in events if completed("Gather-1")(e)]
    assert "inline" not in payload(gathered)["output"]
    assert runs == ["execute", "execute"]
