"""End to end: Attributes, AttributeMaps (load selections), Channels and ChannelMaps with
every condition kind, any_of / all_of and the canonical winner order."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from dex import FlowStatus, StartFlowOptions
from dex.errors import LongPollTimeoutError

from tests.e2e_flows import state_flows
from tests.e2e_flows.harness import (
    Stack,
    e2e_stack,
    history,
    payload,
    unique_id,
    wait_for_phase,
)
from tests.e2e_flows.state_flows import (
    CHANNEL_FLOW,
    ITEMS,
    OWNER,
    BoxMessage,
    Collected,
    StateView,
    WaitPlan,
)

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-state")) as running:
        yield running


# --------------------------------------------------------------------------- attributes


async def test_attributes_and_attribute_maps_with_load_selections(stack: Stack) -> None:
    flow_id = unique_id("attrs")
    options = StartFlowOptions().with_attribute(OWNER, "alice")
    await stack.client.start_flow(state_flows.ATTRIBUTE_FLOW, flow_id, 5, options)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED, result
    assert result.single_output(int) == 6

    view: StateView = await stack.client.invoke_rpc(state_flows.ATTRIBUTE_FLOW.view, flow_id)
    assert view.owner == "alice"
    assert view.counter == 6
    assert view.items == {"a": "ay", "c": "sea", "k 1?x": "slash"}
    assert view.report == {
        "owner_initial": "'alice'",
        "counter_unset": "0",
        "counter_read_own_write": "5",
        "items_a_own_write": "'ay'",
        "keys": "('a', 'b', 'c', 'k 1?x')",
        "size": "4",
        "slash_value": "'slash'",
        "keys_after_delete": "('a', 'c', 'k 1?x')",
        "selected_c": "'sea'",
        "selected_a": "'not-loaded'",
        "unloaded_c": "'not-loaded'",
        "counter_final": "6",
    }


async def test_initial_map_instances_with_slash_keys_round_trip(stack: Stack) -> None:
    # with_attribute_map takes every key AttributeMap takes, "/" included: the key is
    # URL-quoted in the physical name, so it cannot be confused with the separator.
    flow_id = unique_id("slash-keys")
    options = (
        StartFlowOptions()
        .with_attribute_map(ITEMS, "dir/file", "initial")
        .with_attribute_map(ITEMS, "/", "root")
    )
    await stack.client.start_flow(state_flows.ATTRIBUTE_FLOW, flow_id, 1, options)
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED, result

    view: StateView = await stack.client.invoke_rpc(state_flows.ATTRIBUTE_FLOW.view, flow_id)
    assert view.items == {
        "/": "root",
        "a": "ay",
        "c": "sea",
        "dir/file": "initial",
        "k 1?x": "slash",
    }
    assert view.report["keys"] == "('/', 'a', 'b', 'c', 'dir/file', 'k 1?x')"
    started = (await history(stack.client, flow_id))[0]
    assert set(payload(started)["initialAttributes"]) == {"items/dir%2Ffile", "items/%2F"}


async def test_rpc_reading_an_unloaded_map_instance_raises_not_loaded(stack: Stack) -> None:
    flow_id = unique_id("unloaded")
    await stack.client.start_flow(state_flows.ATTRIBUTE_FLOW, flow_id, 1)
    await stack.client.wait_for_flow(flow_id, timeout=20)
    answer = await stack.client.invoke_rpc(state_flows.ATTRIBUTE_FLOW.read_unloaded, flow_id)
    assert answer.startswith("AttributeMapNotLoadedError")


# --------------------------------------------------------------------------- channels


async def _start_collect(stack: Stack, plan: WaitPlan) -> str:
    flow_id = unique_id(f"chan-{plan.kind}")
    await stack.client.start_flow(CHANNEL_FLOW, flow_id, plan)
    return flow_id


async def _collected(stack: Stack, flow_id: str) -> Collected:
    result = await stack.client.wait_for_flow(flow_id, timeout=20)
    assert result.status is FlowStatus.COMPLETED, result
    collected: Collected = result.single_output(Collected)
    return collected


async def _still_waiting(stack: Stack, flow_id: str) -> None:
    await wait_for_phase(stack.client, flow_id, "Collect", "waiting")
    with pytest.raises(LongPollTimeoutError):
        await stack.client.wait_for_flow(flow_id, timeout=0.2)


async def _inbox_left(stack: Stack, flow_id: str) -> int:
    size: int = await stack.client.invoke_rpc(CHANNEL_FLOW.inbox_size, flow_id)
    return size


async def test_for_one_consumes_exactly_one_message(stack: Stack) -> None:
    flow_id = await _start_collect(stack, WaitPlan(kind="for_one"))
    await _still_waiting(stack, flow_id)
    await stack.client.invoke_rpc(CHANNEL_FLOW.push, flow_id, [1, 2, 3])
    assert (await _collected(stack, flow_id)).inbox == [1]
    assert await _inbox_left(stack, flow_id) == 2


async def test_for_n_waits_for_n_and_consumes_n_in_fifo_order(stack: Stack) -> None:
    flow_id = await _start_collect(stack, WaitPlan(kind="for_n", n=3))
    await stack.client.invoke_rpc(CHANNEL_FLOW.push, flow_id, [10, 11])
    await _still_waiting(stack, flow_id)
    await stack.client.invoke_rpc(CHANNEL_FLOW.push, flow_id, [12, 13])
    assert (await _collected(stack, flow_id)).inbox == [10, 11, 12]
    assert await _inbox_left(stack, flow_id) == 1


async def test_at_least_consumes_everything_queued(stack: Stack) -> None:
    flow_id = await _start_collect(stack, WaitPlan(kind="at_least", n=2, prepublish=[1]))
    await _still_waiting(stack, flow_id)
    await stack.client.invoke_rpc(CHANNEL_FLOW.push, flow_id, [2, 3, 4])
    assert (await _collected(stack, flow_id)).inbox == [1, 2, 3, 4]
    assert await _inbox_left(stack, flow_id) == 0


async def test_at_most_is_ready_at_once_and_takes_up_to_n(stack: Stack) -> None:
    flow_id = await _start_collect(stack, WaitPlan(kind="at_most", n=2, prepublish=[5, 6, 7]))
    assert (await _collected(stack, flow_id)).inbox == [5, 6]
    assert await _inbox_left(stack, flow_id) == 1

    empty = await _start_collect(stack, WaitPlan(kind="at_most", n=2))
    assert (await _collected(stack, empty)).inbox == []


async def test_for_range_waits_for_the_minimum_and_takes_up_to_the_maximum(stack: Stack) -> None:
    flow_id = await _start_collect(stack, WaitPlan(kind="for_range", n=2, hi=3, prepublish=[1]))
    await _still_waiting(stack, flow_id)
    await stack.client.invoke_rpc(CHANNEL_FLOW.push, flow_id, [2, 3, 4, 5])
    assert (await _collected(stack, flow_id)).inbox == [1, 2, 3]
    assert await _inbox_left(stack, flow_id) == 2


async def test_channel_map_instances_are_independent_queues(stack: Stack) -> None:
    plan = WaitPlan(kind="map_for_one", key="k 1?", prepublish_boxes={"k2": ["x", "y"]})
    flow_id = await _start_collect(stack, plan)
    await _still_waiting(stack, flow_id)  # messages of another instance do not wake it
    await stack.client.invoke_rpc(CHANNEL_FLOW.push_box, flow_id, BoxMessage(key="k 1?", value="a"))
    assert (await _collected(stack, flow_id)).boxes == ["a"]
    assert await stack.client.invoke_rpc(CHANNEL_FLOW.box_size, flow_id, "k2") == 2
    assert await stack.client.invoke_rpc(CHANNEL_FLOW.box_size, flow_id, "k 1?") == 0


async def test_any_of_timer_wins_over_channel_when_both_are_ready(stack: Stack) -> None:
    # The message is queued before the Wait and the Timer is zero: both are ready at the
    # first evaluation, and the canonical order (Timers, then Channels) picks the Timer,
    # which leaves the message queued.
    plan = WaitPlan(kind="any_timer_vs_channel", timer_s=0.0, prepublish=[42])
    flow_id = await _start_collect(stack, plan)
    collected = await _collected(stack, flow_id)
    assert collected.timer_fired is True
    assert collected.inbox == []
    assert await _inbox_left(stack, flow_id) == 1


async def test_any_of_channel_wins_when_only_it_is_ready(stack: Stack) -> None:
    flow_id = await _start_collect(stack, WaitPlan(kind="any_timer_vs_channel", timer_s=60.0))
    await _still_waiting(stack, flow_id)
    await stack.client.invoke_rpc(CHANNEL_FLOW.push, flow_id, [9])
    collected = await _collected(stack, flow_id)
    assert collected.timer_fired is False
    assert collected.inbox == [9]


async def test_any_of_channels_first_declared_wins_and_only_it_consumes(stack: Stack) -> None:
    plan = WaitPlan(kind="any_map_first", key="m", prepublish=[1], prepublish_boxes={"m": ["z"]})
    flow_id = await _start_collect(stack, plan)
    collected = await _collected(stack, flow_id)
    assert collected.boxes == ["z"]
    assert collected.inbox == []
    assert await _inbox_left(stack, flow_id) == 1


async def test_all_of_needs_every_condition(stack: Stack) -> None:
    plan = WaitPlan(kind="all_of", n=2, key="x", timer_s=0.1, prepublish=[1, 2, 3])
    flow_id = await _start_collect(stack, plan)
    await _still_waiting(stack, flow_id)
    await stack.client.invoke_rpc(CHANNEL_FLOW.push_box, flow_id, BoxMessage(key="x", value="v"))
    collected = await _collected(stack, flow_id)
    assert collected == Collected(inbox=[1, 2], boxes=["v"], timer_fired=True)
    assert await _inbox_left(stack, flow_id) == 1
