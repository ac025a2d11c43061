"""End to end: Step sequences, fan-out, completion, failure, dead ends, cancellation,
history events, and the sync Worker. Real server subprocess, real Worker child."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from dex import FlowErrorType, FlowStatus
from dex.errors import LongPollTimeoutError

from tests.e2e_flows import step_flows, time_flows
from tests.e2e_flows.harness import (
    SYNC_FLOWS,
    Stack,
    SyncWorkerChild,
    active_steps,
    completed,
    e2e_stack,
    history,
    payload,
    step_events,
    unique_id,
    wait_for_event,
    wait_for_phase,
)
from tests.e2e_flows.step_flows import Trace
from tests.support import async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-steps")) as running:
        yield running


async def test_sequential_steps_pass_inputs_and_identity(stack: Stack) -> None:
    flow_id = unique_id("seq")
    run_id = await stack.client.start_flow(step_flows.SEQUENTIAL, flow_id, 4)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)

    assert result.status is FlowStatus.COMPLETED
    trace = result.single_output(Trace)
    assert trace == Trace(
        value=10,
        flow_id=flow_id,
        step_type="SeqFinish",
        step_execution_id="SeqFinish-1",
        from_step_execution_id="SeqDouble-1",
        attempt=1,
    )
    info = await stack.client.describe_flow(flow_id)
    assert (info.run_id, info.flow_type) == (run_id, "Sequential")
    assert info.status is FlowStatus.COMPLETED
    assert info.closed_at is not None and info.closed_at >= info.started_at


async def test_history_records_each_step_once_in_order(stack: Stack) -> None:
    flow_id = unique_id("hist")
    run_id = await stack.client.start_flow(step_flows.SEQUENTIAL, flow_id, 1)
    await stack.client.wait_for_flow(flow_id, timeout=20)

    events = await history(stack.client, flow_id)
    types = [e.type for e in events]
    assert types[0] == "FlowStarted"
    assert types[-1] == "FlowClosed"
    assert step_events(events, "StepExecuteCompleted") == ["SeqAdd-1", "SeqDouble-1", "SeqFinish-1"]
    ids = [e.event_id for e in events]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)

    double = next(e for e in events if completed("SeqDouble-1")(e))
    context = payload(double)["context"]
    assert context["stepType"] == "SeqDouble"
    assert context["fromStepExecutionId"] == "SeqAdd-1"
    assert context["finalAttempt"] == 1
    assert payload(double)["input"]["stepInput"] == 2

    page = await stack.client.get_history(flow_id, run_id=run_id, page_size=2)
    assert [e.event_id for e in page.events] == ids[:2]
    assert page.next_page_token
    rest = await stack.client.get_history(flow_id, page_size=100, page_token=page.next_page_token)
    assert [e.event_id for e in rest.events] == ids[2:]


async def test_go_to_many_fans_out_and_collects_every_graceful_output(stack: Stack) -> None:
    flow_id = unique_id("fan")
    await stack.client.start_flow(step_flows.FAN_OUT, flow_id, 5)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)

    assert result.status is FlowStatus.COMPLETED
    outputs = sorted(c.output_as(int) for c in result.completions)
    assert outputs == [0, 1, 4, 9, 16]
    assert sorted(c.step_execution_id for c in result.completions) == [
        f"Square-{n}" for n in range(1, 6)
    ]


async def test_graceful_complete_waits_for_parked_step(stack: Stack) -> None:
    flow_id = unique_id("graceful")
    await stack.client.start_flow(step_flows.COMPLETION, flow_id, "graceful")
    await wait_for_event(stack.client, flow_id, completed("Decide-1"), "Decide ran")
    await wait_for_phase(stack.client, flow_id, "ParkedUntilRelease", "waiting")

    with pytest.raises(LongPollTimeoutError):
        await stack.client.wait_for_flow(flow_id, timeout=0.3)
    assert (await stack.client.describe_flow(flow_id)).status is FlowStatus.RUNNING

    await stack.client.invoke_rpc(step_flows.COMPLETION.release, flow_id, "now")
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED
    assert sorted(c.output_as(str) for c in result.completions) == ["decided", "parked:now"]


async def test_force_complete_closes_now_and_discards_parked_step(stack: Stack) -> None:
    flow_id = unique_id("force")
    await stack.client.start_flow(step_flows.COMPLETION, flow_id, "force")
    result = await stack.client.wait_for_flow(flow_id, timeout=20)

    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "forced"
    events = await history(stack.client, flow_id)
    assert "ParkedUntilRelease-1" not in step_events(events, "StepExecuteCompleted")
    assert not [s for s in await active_steps(stack.client, flow_id)]


async def test_force_fail_fails_the_flow_with_the_reason(stack: Stack) -> None:
    flow_id = unique_id("fail")
    await stack.client.start_flow(step_flows.COMPLETION, flow_id, "fail")
    result = await stack.client.wait_for_flow(flow_id, timeout=20)

    assert result.status is FlowStatus.FAILED
    assert result.error_type is FlowErrorType.STEP_DECISION_FAILED
    assert "decided to fail" in (result.error_message or "")
    assert (await stack.client.describe_flow(flow_id)).status is FlowStatus.FAILED


async def test_dead_end_branch_does_not_block_graceful_completion(stack: Stack) -> None:
    flow_id = unique_id("dead")
    await stack.client.start_flow(step_flows.COMPLETION, flow_id, "dead_end")
    await wait_for_event(stack.client, flow_id, completed("Decide-1"), "Decide dead-ended")
    assert (await stack.client.describe_flow(flow_id)).status is FlowStatus.RUNNING
    await stack.client.invoke_rpc(step_flows.COMPLETION.release, flow_id, "x")
    await wait_for_event(
        stack.client, flow_id, completed("ParkedUntilRelease-1"), "parked Step finished"
    )

    # both branches ended, one with graceful_complete; the dead end alone never closes it,
    # but the graceful request closes the Flow once nothing is active.
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "parked:x"


async def test_dead_end_only_flow_stays_running(stack: Stack) -> None:
    flow_id = unique_id("dead-only")
    await stack.client.start_flow(step_flows.CANCELLATION, flow_id, "siblings")
    # Branch "a": SiblingCanceler dead-ends; Blocker "b" keeps waiting; nothing completes.
    await wait_for_event(
        stack.client, flow_id, completed("SiblingCanceler-1"), "SiblingCanceler ran"
    )
    with pytest.raises(LongPollTimeoutError):
        await stack.client.wait_for_flow(flow_id, timeout=0.3)
    assert (await stack.client.describe_flow(flow_id)).status is FlowStatus.RUNNING
    await stack.client.stop_flow(flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.CANCELED


async def test_canceling_steps_cancels_every_live_execution_of_the_type(stack: Stack) -> None:
    flow_id = unique_id("cancel")
    await stack.client.start_flow(step_flows.CANCELLATION, flow_id, "all")
    # Without the cancel, graceful completion would wait for the two Blockers forever.
    result = await stack.client.wait_for_flow(flow_id, timeout=20)

    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(str) == "canceled-all"
    events = await history(stack.client, flow_id)
    done = step_events(events, "StepExecuteCompleted")
    assert "Canceler-1" in done
    assert not [d for d in done if d.startswith("Blocker-")]


async def test_canceling_sibling_steps_spares_other_branches(stack: Stack) -> None:
    flow_id = unique_id("siblings")
    await stack.client.start_flow(step_flows.CANCELLATION, flow_id, "siblings")
    await wait_for_event(
        stack.client, flow_id, completed("SiblingCanceler-1"), "SiblingCanceler ran"
    )

    async def one_blocker_left() -> list[str] | None:
        steps = await active_steps(stack.client, flow_id)
        blockers = [s for s in steps if s.step_type == "Blocker"]
        if len(blockers) == 1 and blockers[0].phase == "waiting":
            return [blockers[0].from_step_execution_id]
        return None

    (survivor_parent,) = await async_wait_until("only branch b's Blocker is live", one_blocker_left)
    canceler = next(
        payload(e)["context"]
        for e in await history(stack.client, flow_id)
        if completed("SiblingCanceler-1")(e)
    )
    assert survivor_parent != canceler["fromStepExecutionId"]

    await stack.client.invoke_rpc(step_flows.CANCELLATION.go, flow_id)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(str) == f"b@{survivor_parent}"


async def test_rpc_canceling_steps(stack: Stack) -> None:
    flow_id = unique_id("rpc-cancel")
    await stack.client.start_flow(step_flows.CANCELLATION, flow_id, "siblings")
    await wait_for_phase(stack.client, flow_id, "Blocker", "waiting")
    await wait_for_event(
        stack.client, flow_id, completed("SiblingCanceler-1"), "SiblingCanceler ran"
    )
    assert await stack.client.invoke_rpc(step_flows.CANCELLATION.cancel_blockers, flow_id) == "ok"

    async def no_blockers() -> bool:
        steps = await active_steps(stack.client, flow_id)
        return not [s for s in steps if s.step_type == "Blocker"]

    await async_wait_until("every Blocker is canceled", no_blockers)
    assert (await stack.client.describe_flow(flow_id)).status is FlowStatus.RUNNING
    await stack.client.stop_flow(flow_id)


async def test_sync_worker_runs_sync_flows(stack: Stack, tmp_path: Path) -> None:
    # A second server just for the sync Worker, so the async Worker cannot take the tasks.
    async with e2e_stack(tmp_path / "sync", workers=0) as only:
        child = SyncWorkerChild(SYNC_FLOWS, server_address=only.server.address, gate_dir=tmp_path)
        try:
            flow_id = unique_id("sync-seq")
            await only.client.start_flow(step_flows.SEQUENTIAL, flow_id, 2)
            result = await only.client.wait_for_flow(flow_id, timeout=30)
            assert result.single_output(Trace).value == 6

            flow_id = unique_id("sync-gen")
            await only.client.start_flow(time_flows.GENERATOR_FLOW, flow_id, flow_id)
            result = await only.client.wait_for_flow(flow_id, timeout=30)
            assert result.single_output(str) == "gen-checkpoint|2"
            assert child.is_alive()
        finally:
            child.close()
