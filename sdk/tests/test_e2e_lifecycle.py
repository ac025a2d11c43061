"""End to end: Flow ID reuse, request ids, stop types, start delay, recorded events, and
pending Channel messages listed and deleted by RPCs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from dex import (
    FlowErrorType,
    FlowStatus,
    IdReusePolicy,
    StartFlowOptions,
    StopFlowOptions,
    StopType,
)
from dex.errors import (
    ChannelMessageNotFoundError,
    FlowAlreadyStartedError,
    FlowNotActiveOrNotFoundError,
)

from tests.e2e_flows.harness import (
    Stack,
    e2e_stack,
    history,
    payload,
    unique_id,
    wait_for_phase,
)
from tests.e2e_flows.lifecycle_flows import LIFECYCLE, Pending
from tests.support import async_wait_until, open_sockets

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-lifecycle")) as running:
        yield running


async def _finish(stack: Stack, flow_id: str, text: str) -> None:
    await wait_for_phase(stack.client, flow_id, "Hold", "waiting")
    await stack.client.invoke_rpc(LIFECYCLE.post, flow_id, text)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(list[str]) == [text]


async def test_default_id_reuse_starts_a_new_run_after_close(stack: Stack) -> None:
    flow_id = unique_id("reuse")
    first = await stack.client.start_flow(LIFECYCLE, flow_id, "wait")
    await _finish(stack, flow_id, "one")
    second = await stack.client.start_flow(LIFECYCLE, flow_id, "wait")
    assert second != first
    info = await stack.client.describe_flow(flow_id)
    assert (info.run_id, info.status) == (second, FlowStatus.RUNNING)
    await _finish(stack, flow_id, "two")
    old = await stack.client.get_history(flow_id, run_id=first)
    assert old.run_id == first and old.events[-1].type == "FlowClosed"


async def test_disallow_rejects_reuse_even_after_close(stack: Stack) -> None:
    flow_id = unique_id("disallow")
    await stack.client.start_flow(LIFECYCLE, flow_id, "done")
    await stack.client.wait_for_flow(flow_id, timeout=20)
    with pytest.raises(FlowAlreadyStartedError):
        await stack.client.start_flow(
            LIFECYCLE, flow_id, "done", StartFlowOptions(id_reuse_policy=IdReusePolicy.DISALLOW)
        )


async def test_allow_if_previous_failed(stack: Stack) -> None:
    flow_id = unique_id("prev-failed")
    options = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_IF_PREVIOUS_FAILED)
    await stack.client.start_flow(LIFECYCLE, flow_id, "done")
    await stack.client.wait_for_flow(flow_id, timeout=20)
    with pytest.raises(FlowAlreadyStartedError):
        await stack.client.start_flow(LIFECYCLE, flow_id, "wait", options)

    failed_id = unique_id("prev-failed")
    await stack.client.start_flow(LIFECYCLE, failed_id, "wait")
    await stack.client.stop_flow(failed_id, StopFlowOptions(type=StopType.FAIL, reason="r"))
    await stack.client.wait_for_flow(failed_id, timeout=20)
    await stack.client.start_flow(LIFECYCLE, failed_id, "done", options)
    assert (await stack.client.wait_for_flow(failed_id, timeout=20)).status is (
        FlowStatus.COMPLETED
    )


async def test_allow_terminate_if_running_replaces_the_running_run(stack: Stack) -> None:
    flow_id = unique_id("terminate-reuse")
    first = await stack.client.start_flow(LIFECYCLE, flow_id, "wait")
    options = StartFlowOptions(id_reuse_policy=IdReusePolicy.ALLOW_TERMINATE_IF_RUNNING)
    second = await stack.client.start_flow(LIFECYCLE, flow_id, "wait", options)
    assert second != first
    old = await stack.client.get_history(flow_id, run_id=first)
    assert old.events[-1].type == "FlowClosed"
    await _finish(stack, flow_id, "replaced")


async def test_request_id_makes_start_idempotent(stack: Stack) -> None:
    flow_id = unique_id("request-id")
    options = StartFlowOptions(request_id="req-1", ignore_already_started=True)
    run_id = await stack.client.start_flow(LIFECYCLE, flow_id, "wait", options)
    assert await stack.client.start_flow(LIFECYCLE, flow_id, "wait", options) == run_id
    other = StartFlowOptions(request_id="req-2", ignore_already_started=True)
    with pytest.raises(FlowAlreadyStartedError):
        await stack.client.start_flow(LIFECYCLE, flow_id, "wait", other)
    await _finish(stack, flow_id, "once")


@pytest.mark.parametrize(
    ("stop_type", "status"),
    [
        (StopType.CANCEL, FlowStatus.CANCELED),
        (StopType.TERMINATE, FlowStatus.TERMINATED),
        (StopType.FAIL, FlowStatus.FAILED),
    ],
)
async def test_stop_types(stack: Stack, stop_type: StopType, status: FlowStatus) -> None:
    flow_id = unique_id(f"stop-{stop_type.value}")
    await stack.client.start_flow(LIFECYCLE, flow_id, "wait")
    await wait_for_phase(stack.client, flow_id, "Hold", "waiting")
    await stack.client.stop_flow(flow_id, StopFlowOptions(type=stop_type, reason="operator"))
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is status
    if stop_type is StopType.FAIL:
        assert result.error_type is FlowErrorType.CLIENT_API_FAILED
        assert result.error_code == "CLIENT_API_FAILING_FLOW"
        assert result.error_message == "operator"
    if stop_type is StopType.TERMINATE:
        # a terminated Flow reports no error message; the reason stays in its history
        assert result.error_message is None
        events = await history(stack.client, flow_id)
        closed = [payload(e) for e in events if e.type == "FlowClosed"]
        assert closed[-1]["errorDetail"] == "operator"
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.stop_flow(flow_id)
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.invoke_rpc(LIFECYCLE.post, flow_id, "late")


async def test_start_delay_defers_the_start_step(stack: Stack) -> None:
    flow_id = unique_id("delay")
    before = time.time()
    await stack.client.start_flow(LIFECYCLE, flow_id, "done", StartFlowOptions(start_delay=0.6))
    assert (await stack.client.describe_flow(flow_id)).status is FlowStatus.RUNNING
    await stack.client.wait_for_flow(flow_id, timeout=20)
    events = await history(stack.client, flow_id)
    holding = [e for e in events if e.type == "StepWaitForCompleted"]
    assert len(holding) == 1
    assert holding[0].event_time - before >= 0.55


async def test_recorded_events_appear_in_history(stack: Stack) -> None:
    flow_id = unique_id("events")
    await stack.client.start_flow(LIFECYCLE, flow_id, "done")
    await stack.client.wait_for_flow(flow_id, timeout=20)
    events = await history(stack.client, flow_id)
    wait_for = next(e for e in events if e.type == "StepWaitForCompleted")
    raw = bytes(wait_for.payload)
    assert b"holding" in raw and b'"mode":"done"' in raw


async def test_rpcs_list_and_delete_pending_channel_messages(stack: Stack) -> None:
    flow_id = unique_id("pending")
    await stack.client.start_flow(LIFECYCLE, flow_id, "shelf")
    await wait_for_phase(stack.client, flow_id, "Hold", "waiting")
    for text in ("a", "b", "c"):
        await stack.client.invoke_rpc(LIFECYCLE.post, flow_id, text)

    pending: list[Pending] = await stack.client.invoke_rpc(LIFECYCLE.pending, flow_id)
    assert [p.value for p in pending] == ["a", "b", "c"]
    assert len({p.message_id for p in pending}) == 3

    assert await stack.client.invoke_rpc(LIFECYCLE.drop, flow_id, [pending[1].message_id]) == 2
    after: list[Pending] = await stack.client.invoke_rpc(LIFECYCLE.pending, flow_id)
    assert [p.value for p in after] == ["a", "c"]

    # a transactional RPC naming a message that is not pending aborts whole
    with pytest.raises(ChannelMessageNotFoundError):
        await stack.client.invoke_rpc(
            LIFECYCLE.drop, flow_id, [pending[0].message_id, pending[1].message_id]
        )
    unchanged: list[Pending] = await stack.client.invoke_rpc(LIFECYCLE.pending, flow_id)
    assert [p.value for p in unchanged] == ["a", "c"]

    await stack.client.invoke_rpc(LIFECYCLE.shelve, flow_id, [7, 8, 9])
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(list[str]) == ["7", "8"]


async def test_many_waiting_long_polls_do_not_hold_up_other_requests(stack: Stack) -> None:
    # More pending wait_for_flow calls than the ordinary pool has connections (100): a
    # describe must still be answered at once, and every wait returns once its Flow closes.
    waits = 150
    flow_ids = [unique_id("long-poll") for _ in range(waits)]
    for flow_id in flow_ids:
        await stack.client.start_flow(LIFECYCLE, flow_id, "wait")
    client = stack.client_for(None)
    before = open_sockets(stack.server.pid)
    pending = [asyncio.create_task(client.wait_for_flow(f, timeout=60)) for f in flow_ids]
    try:

        async def all_polling() -> bool | None:
            return open_sockets(stack.server.pid) >= before + waits or None

        await async_wait_until(f"{waits} long polls connected", all_polling, timeout=30)
        info = await asyncio.wait_for(client.describe_flow(flow_ids[0]), timeout=10)
        assert info.status == FlowStatus.RUNNING
        assert not any(t.done() for t in pending)
        for flow_id in flow_ids:
            await wait_for_phase(stack.client, flow_id, "Hold", "waiting")
            await stack.client.invoke_rpc(LIFECYCLE.post, flow_id, "done")
        results = await asyncio.wait_for(asyncio.gather(*pending), timeout=60)
        assert [r.single_output(list[str]) for r in results] == [["done"]] * waits
    finally:
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        await client.close()
