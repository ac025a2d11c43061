"""End to end: RPCs (plain, transactional, async, scheduling and cancelling Steps, locks),
Streams, and Channel fan-in from concurrent publishers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from dex import Client, ClientOptions, FlowStatus
from dex.errors import (
    FlowNotActiveOrNotFoundError,
    LongPollTimeoutError,
    RpcLockConflictError,
    WorkerInvocationError,
)

from tests.e2e_flows import rpc_flows
from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import (
    Stack,
    active_steps,
    e2e_stack,
    history,
    payload,
    registry,
    unique_id,
    wait_for_phase,
)
from tests.e2e_flows.rpc_flows import LOCK_FLOW, RPC_FLOW, DrainPlan, Note, Scheduled
from tests.support import FileGate, async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-rpc")) as running:
        yield running


async def test_plain_and_async_rpcs_return_outputs(stack: Stack) -> None:
    flow_id = unique_id("rpc-plain")
    await stack.client.start_flow(RPC_FLOW, flow_id)
    assert await stack.client.invoke_rpc(RPC_FLOW.echo, flow_id, "hi") == f"echo hi from {flow_id}"
    assert await stack.client.invoke_rpc(RPC_FLOW.read, flow_id) is None
    assert await stack.client.invoke_rpc(RPC_FLOW.async_read, flow_id) == 0
    with pytest.raises(WorkerInvocationError) as raised:
        await stack.client.invoke_rpc(RPC_FLOW.fail, flow_id, "oops")
    assert "LookupError" in f"{raised.value} {raised.value.detail}"
    await stack.client.stop_flow(flow_id)


async def test_transactional_rpc_writes_and_wakes_a_waiting_step(stack: Stack) -> None:
    flow_id = unique_id("rpc-tx")
    await stack.client.start_flow(RPC_FLOW, flow_id)
    await wait_for_phase(stack.client, flow_id, "Idle", "waiting")
    assert await stack.client.invoke_rpc(RPC_FLOW.hit, flow_id, "first") == 1
    assert await stack.client.invoke_rpc(RPC_FLOW.hit, flow_id, "second") == 2

    async def woken() -> str | None:
        notes: str | None = await stack.client.invoke_rpc(RPC_FLOW.read, flow_id)
        return notes

    assert await async_wait_until("Idle woke", woken) == "woken by first"
    assert await stack.client.invoke_rpc(RPC_FLOW.async_read, flow_id) == 2

    events = await history(stack.client, flow_id)
    rpc_events = [payload(e) for e in events if e.type == "RpcExecutionCompleted"]
    assert len(rpc_events) >= 2
    await stack.client.stop_flow(flow_id)


async def test_rpc_schedules_a_step(stack: Stack) -> None:
    flow_id = unique_id("rpc-schedule")
    await stack.client.start_flow(RPC_FLOW, flow_id)
    assert await stack.client.invoke_rpc(RPC_FLOW.schedule, flow_id, "job") == "scheduled"
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(Scheduled) == Scheduled(
        input="job",
        step_execution_id="Work-1",
        from_step_execution_id="__rpc/schedule",
        notes="scheduled job",
    )


async def test_rpc_cancels_steps(stack: Stack) -> None:
    flow_id = unique_id("rpc-cancel")
    await stack.client.start_flow(RPC_FLOW, flow_id)
    await stack.client.invoke_rpc(RPC_FLOW.park_steps, flow_id, 2)
    await wait_for_phase(stack.client, flow_id, "Parked", "waiting", count=2)
    assert await stack.client.invoke_rpc(RPC_FLOW.cancel_parked, flow_id) == "canceled"

    async def none_parked() -> bool:
        return not [s for s in await active_steps(stack.client, flow_id) if s.step_type == "Parked"]

    await async_wait_until("Parked Steps are canceled", none_parked)
    # The Idle start Step is still waiting: the one message wakes Idle, not a Parked Step.
    await stack.client.invoke_rpc(RPC_FLOW.hit, flow_id, "after-cancel")
    assert (
        await async_wait_until("Idle woke", lambda: stack.client.invoke_rpc(RPC_FLOW.read, flow_id))
        == "woken by after-cancel"
    )
    with pytest.raises(LongPollTimeoutError):
        await stack.client.wait_for_flow(flow_id, timeout=0.2)
    await stack.client.stop_flow(flow_id)


async def test_effect_free_rpc_serves_a_closed_flow_but_effects_are_rejected(
    stack: Stack,
) -> None:
    flow_id = unique_id("rpc-closed")
    await stack.client.start_flow(RPC_FLOW, flow_id)
    await stack.client.invoke_rpc(RPC_FLOW.schedule, flow_id, "x")
    await stack.client.wait_for_flow(flow_id, timeout=20)

    assert await stack.client.invoke_rpc(RPC_FLOW.read, flow_id) == "scheduled x"
    late = await stack.client.invoke_rpc(RPC_FLOW.echo, flow_id, "late")
    assert late == f"echo late from {flow_id}"
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.invoke_rpc(RPC_FLOW.hit, flow_id, "too late")
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.invoke_rpc(RPC_FLOW.schedule, flow_id, "too late")
    assert await stack.client.invoke_rpc(RPC_FLOW.async_read, flow_id) == 0


# --------------------------------------------------------------------------- locks


async def test_rpc_lock_conflict_while_a_step_holds_the_lock_and_steps_queue(
    stack: Stack,
) -> None:
    flow_id = unique_id("locks")
    tag = flow_id
    await stack.client.start_flow(LOCK_FLOW, flow_id)
    await stack.client.invoke_rpc(LOCK_FLOW.hold, flow_id, tag)
    await stack.client.invoke_rpc(LOCK_FLOW.hold, flow_id, tag)

    first = FileGate(stack.directory, f"{tag}-HoldLock-1")
    second = FileGate(stack.directory, f"{tag}-HoldLock-2")
    holder, waiter = first, second
    await async_wait_until(
        "one HoldLock holds the lock",
        lambda: _async_bool(first.is_reached() or second.is_reached()),
    )
    if second.is_reached():
        holder, waiter = second, first

    with pytest.raises(RpcLockConflictError):
        await stack.client.invoke_rpc(LOCK_FLOW.bump, flow_id)
    # an RPC without the lock is not blocked
    assert await stack.client.invoke_rpc(LOCK_FLOW.guard, flow_id) == 0
    # the other Step queues for the lock instead of running
    steps = await active_steps(stack.client, flow_id)
    assert sorted(s.phase for s in steps) == ["queued_execute", "running_execute"]
    assert not waiter.is_reached()

    holder.release()
    await waiter.async_wait_until_reached()
    with pytest.raises(RpcLockConflictError):
        await stack.client.invoke_rpc(LOCK_FLOW.bump, flow_id)
    waiter.release()

    async def bumped() -> int | None:
        try:
            value: int = await stack.client.invoke_rpc(LOCK_FLOW.bump, flow_id)
        except RpcLockConflictError:
            return None
        return value

    assert await async_wait_until("the lock is free again", bumped) == 102
    lines = read_log(stack.directory, tag)
    assert [line.split()[0] for line in lines] == ["start", "end", "start", "end"]
    await stack.client.stop_flow(flow_id)


async def _async_bool(value: bool) -> bool:
    return value


# --------------------------------------------------------------------------- streams


async def test_streams_written_by_a_step_and_read_by_the_client(stack: Stack) -> None:
    flow_id = unique_id("stream")
    stream = rpc_flows.TEXT
    await stack.client.start_flow(rpc_flows.STREAM_FLOW, flow_id, "alpha beta gamma")
    await stack.client.wait_for_flow(flow_id, timeout=20)

    first = await stack.client.read_stream(flow_id, stream, timeout=5)
    assert (first.value, first.source) == ("alpha", "#Speak-1")
    second = await stack.client.read_stream(flow_id, stream, first.resume_token, timeout=5)
    third = await stack.client.read_stream(flow_id, stream, second.resume_token, timeout=5)
    assert [second.value, third.value] == ["beta", "gamma"]

    # buffered_text flushes the chunks before the result: one or more messages, in order
    text = ""
    token = third.resume_token
    while text != "buffered":
        message = await stack.client.read_stream(flow_id, stream, token, timeout=5)
        text += message.value
        token = message.resume_token
    with pytest.raises(LongPollTimeoutError):
        await stack.client.read_stream(flow_id, stream, token, timeout=0.2)

    await stack.client.write_stream(flow_id, stream, "tester", "from client")
    message = await stack.client.read_stream(flow_id, stream, token, timeout=5)
    assert (message.value, message.source) == ("from client", "tester")

    page = await stack.client.list_stream_messages(flow_id, stream, page_size=2)
    assert [m.value for m in page.messages][0] == "from client"
    assert len(page.messages) == 2 and page.before_page_token
    older = await stack.client.list_stream_messages(
        flow_id, stream, page_size=100, before_page_token=page.before_page_token
    )
    assert [m.value for m in older.messages][-3:] == ["gamma", "beta", "alpha"]


async def test_client_stream_read_long_polls_for_the_next_message(stack: Stack) -> None:
    flow_id = unique_id("stream-poll")
    stream = rpc_flows.TEXT
    reader = asyncio.create_task(stack.client.read_stream(flow_id, stream, timeout=10))
    await stack.client.write_stream(flow_id, stream, "writer", "late")
    message = await reader
    assert (message.value, message.source) == ("late", "writer")


async def test_client_reads_the_stream_messages_after_a_token_in_one_request(stack: Stack) -> None:
    flow_id = unique_id("stream-batch")
    stream = rpc_flows.TEXT
    words = [f"w{i}" for i in range(130)]
    for word in words:
        await stack.client.write_stream(flow_id, stream, "writer", word)

    first = await stack.client.read_stream_messages(flow_id, stream, max_messages=3, timeout=5)
    assert [m.value for m in first] == ["w0", "w1", "w2"]
    # the server returns at most 100 at a time, oldest first, each with its own token
    rest = await stack.client.read_stream_messages(
        flow_id, stream, first[-1].resume_token, max_messages=1000, timeout=5
    )
    assert [m.value for m in rest] == words[3:103]
    assert len({m.resume_token for m in rest}) == 100
    last = await stack.client.read_stream_messages(
        flow_id, stream, rest[-1].resume_token, timeout=5
    )
    assert [m.value for m in last] == words[103:]
    single = await stack.client.read_stream(flow_id, stream, first[0].resume_token, timeout=5)
    assert single.value == "w1"

    # nothing after the last one: a long poll that times out, then one a write ends
    with pytest.raises(LongPollTimeoutError):
        await stack.client.read_stream_messages(flow_id, stream, last[-1].resume_token, timeout=0.2)
    reader = asyncio.create_task(
        stack.client.read_stream_messages(flow_id, stream, last[-1].resume_token, timeout=10)
    )
    await stack.client.write_stream(flow_id, stream, "writer", "late")
    assert [m.value for m in await reader] == ["late"]
    for bad in (0, -1, True, 2.5):
        with pytest.raises(ValueError, match="max_messages"):
            await stack.client.read_stream_messages(flow_id, stream, max_messages=bad)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- fan-in


async def test_for_n_with_concurrent_publishers_consumes_each_message_once_fifo(
    stack: Stack,
) -> None:
    flow_id = unique_id("fan-in")
    publishers, per_publisher = 4, 10
    total = publishers * per_publisher
    await stack.client.start_flow(rpc_flows.FAN_IN_FLOW, flow_id, DrainPlan(total=total, batch=5))

    async def publish(publisher: int) -> None:
        method = rpc_flows.FAN_IN_FLOW.send if publisher % 2 else rpc_flows.FAN_IN_FLOW.send_tx
        for seq in range(per_publisher):
            await stack.client.invoke_rpc(method, flow_id, Note(publisher=publisher, seq=seq))

    await asyncio.gather(*(publish(p) for p in range(publishers)))
    result = await stack.client.wait_for_flow(flow_id, timeout=30)
    seen = result.single_output(list[Note])

    assert len(seen) == total
    assert sorted((n.publisher, n.seq) for n in seen) == [
        (p, s) for p in range(publishers) for s in range(per_publisher)
    ]
    for p in range(publishers):
        assert [n.seq for n in seen if n.publisher == p] == list(range(per_publisher))
    events = await history(stack.client, flow_id)
    assert [e.type for e in events].count("StepExecuteCompleted") == total // 5


async def test_an_rpc_retried_with_its_request_id_applies_once(stack: Stack) -> None:
    flow_id = unique_id("rpc-once")
    await stack.client.start_flow(RPC_FLOW, flow_id)
    await wait_for_phase(stack.client, flow_id, "Idle", "waiting")
    client = stack.client
    assert await client.invoke_rpc(RPC_FLOW.hit, flow_id, "a", request_id="hit-1") == 1
    # the retry of a call whose answer was lost: the first output, nothing applied again
    assert await client.invoke_rpc(RPC_FLOW.hit, flow_id, "a", request_id="hit-1") == 1
    assert await client.invoke_rpc(RPC_FLOW.async_read, flow_id) == 1
    assert await client.invoke_rpc(RPC_FLOW.hit, flow_id, "b", request_id="hit-2") == 2

    def sync_calls() -> tuple[int, int]:
        options = ClientOptions(server_address=stack.server.address)
        with Client(registry(), options=options) as sync:
            again = sync.invoke_rpc(RPC_FLOW.hit, flow_id, "b", request_id="hit-2")
            fresh = sync.invoke_rpc(RPC_FLOW.hit, flow_id, "c", request_id="hit-3")
            return again, fresh

    assert await asyncio.to_thread(sync_calls) == (2, 3)
    assert await client.invoke_rpc(RPC_FLOW.async_read, flow_id) == 3
    await client.stop_flow(flow_id)
