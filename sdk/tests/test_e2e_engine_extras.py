"""End to end: wait_for_step_completion, skip_timer and FlowConfig (real server, Worker)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
import pytest_asyncio
from dex import (
    ActiveStepSearchMode,
    AsyncClient,
    Client,
    ClientOptions,
    FlowConfig,
    FlowStatus,
    StartFlowOptions,
    StepDurability,
    StepExecutionId,
    TimerId,
    WorkerTarget,
)
from dex._client._wait_options import WaitForStepCompletionOptions
from dex.errors import (
    BadRequestError,
    FeatureNotAvailableError,
    FlowNotActiveOrNotFoundError,
    FlowNotFoundError,
    RequestTimeoutError,
    StepExecutionNotFoundError,
    TimerNotFoundError,
    TimerNotPendingError,
)
from dex_server.cli import main as cli_main
from dex_server.testing import RunningServer, running_server

from tests.e2e_flows import engine_flows
from tests.e2e_flows.engine_flows import (
    COMBO_FLOW,
    CONFIG_FLOW,
    DRAIN_FLOW,
    GATE_FLOW,
    TIMERS_FLOW,
    Picked,
    TimersSeen,
)
from tests.e2e_flows.harness import history, payload, unique_id, wait_for_phase
from tests.support import WorkerProcess, async_wait_until

pytestmark = pytest.mark.asyncio(loop_scope="module")

FACTORY = "tests.e2e_flows.engine_flows:registry"
REGISTRY = engine_flows.registry()


class Stack:
    def __init__(self, server: RunningServer, client: AsyncClient) -> None:
        self.server = server
        self.client = client


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    directory = tmp_path_factory.mktemp("e2e-engine-extras")
    async with running_server(directory / "server") as srv:
        worker = WorkerProcess(FACTORY, server_address=srv.address)
        client = AsyncClient(REGISTRY, options=ClientOptions(server_address=srv.address))
        try:
            await asyncio.to_thread(worker.start)
            yield Stack(srv, client)
        finally:
            await client.close()
            worker.close()


# --------------------------------------------------------------------------- step waits


async def test_wait_for_step_completion_returns_when_that_execution_ends(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("stepwait")
    await client.start_flow(GATE_FLOW, flow_id, 1)
    await wait_for_phase(client, flow_id, "Hold")
    # polls of one second each: the wait outlives several server long polls
    options = WaitForStepCompletionOptions(internal_handler_timeout=timedelta(seconds=1))
    waiter = asyncio.create_task(
        client.wait_for_step_completion(flow_id, StepExecutionId("Hold"), options)
    )
    done, _ = await asyncio.wait({waiter}, timeout=2.5)
    assert not done, "Hold-1 still waits for its message"
    await client.invoke_rpc(GATE_FLOW.go, flow_id, 10)
    await asyncio.wait_for(waiter, 20)
    # Hold-1 ended and After-1 is waiting now: the Flow itself is still running
    await wait_for_phase(client, flow_id, "After")
    assert (await client.describe_flow(flow_id)).status is FlowStatus.RUNNING
    # an execution that ended answers at once, also through the sync-style default options
    await asyncio.wait_for(client.wait_for_step_completion(flow_id, StepExecutionId("Hold")), 10)

    await client.invoke_rpc(GATE_FLOW.go, flow_id, 100)
    await asyncio.wait_for(client.wait_for_step_completion(flow_id, StepExecutionId("After")), 20)
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(int) == 111
    # a closed Flow's executions all ended
    await client.wait_for_step_completion(flow_id, StepExecutionId("After", 1))


async def test_wait_for_step_completion_errors(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("stepwait-err")
    await client.start_flow(GATE_FLOW, flow_id, 0)
    await wait_for_phase(client, flow_id, "Hold")
    with pytest.raises(StepExecutionNotFoundError) as info:
        await client.wait_for_step_completion(flow_id, StepExecutionId("Hold", 2))
    assert "Hold-2" in str(info.value)
    with pytest.raises(StepExecutionNotFoundError):
        await client.wait_for_step_completion(flow_id, StepExecutionId("NoSuchStep"))
    with pytest.raises(FlowNotFoundError):
        await client.wait_for_step_completion(unique_id("absent"), StepExecutionId("Hold"))
    with pytest.raises(ValueError, match="number >= 1"):
        await client.wait_for_step_completion(flow_id, StepExecutionId("Hold", 0))
    short = WaitForStepCompletionOptions(request_timeout=timedelta(seconds=0.5))
    with pytest.raises(RequestTimeoutError):
        await client.wait_for_step_completion(flow_id, StepExecutionId("Hold"), short)
    # none of it changed the Flow
    await wait_for_phase(client, flow_id, "Hold")
    await client.stop_flow(flow_id)


# --------------------------------------------------------------------------- skip_timer


async def test_skip_timer_by_id_and_index_in_an_all_of_wait(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("skip-all")
    await client.start_flow(TIMERS_FLOW, flow_id, "all")
    await wait_for_phase(client, flow_id, "LongTimers")
    step = StepExecutionId("LongTimers")
    await client.skip_timer(flow_id, step, TimerId.by_condition_id("a"))
    # one of two one-hour timers is due: the Wait still waits for the other
    await wait_for_phase(client, flow_id, "LongTimers")
    with pytest.raises(TimerNotPendingError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_id("a"))
    with pytest.raises(TimerNotFoundError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_id("zzz"))
    with pytest.raises(TimerNotFoundError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_index(2))
    with pytest.raises(StepExecutionNotFoundError):
        await client.skip_timer(flow_id, StepExecutionId("LongTimers", 2), TimerId("a"))
    await client.skip_timer(flow_id, step, TimerId.by_condition_index(1))
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(TimersSeen) == TimersSeen(fired=[True, True], messages=[])
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await client.skip_timer(flow_id, step, TimerId.by_condition_index(0))


async def test_skip_timer_wins_an_any_of_over_a_channel(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("skip-any")
    await client.start_flow(TIMERS_FLOW, flow_id, "any")
    await wait_for_phase(client, flow_id, "LongTimers")
    step = StepExecutionId("LongTimers")
    # the Channel condition is not counted: the timer is index 0
    await client.skip_timer(flow_id, step, TimerId.by_condition_index(0))
    result = await client.wait_for_flow(flow_id, timeout=20)
    assert result.single_output(TimersSeen) == TimersSeen(fired=[True], messages=[])


# --------------------------------------------------------------------------- FlowConfig


def _dexcli(stack: Stack, *args: str) -> str:
    """``dexcli -o json ...`` against the stack's server, in this process; its stdout."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            cli_main(["--server", stack.server.address, "-o", "json", *args])
        except SystemExit as exc:
            assert not exc.code, out.getvalue()
    return out.getvalue()


async def _durabilities(client: AsyncClient, flow_id: str) -> dict[str, str]:
    """``"<event type> <execution>"`` -> the durability the Step event records."""
    seen: dict[str, str] = {}
    for event in await history(client, flow_id):
        if event.type.startswith("Step"):
            context = payload(event)["context"]
            seen[f"{event.type} {context['stepExecutionId']}"] = context["durability"]
    return seen


async def test_config_override_is_kept_shown_and_merged_by_updates(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("config")
    config = FlowConfig(
        active_step_search_mode=ActiveStepSearchMode.ALL,
        continue_as_new_threshold=100,
        step_durability=StepDurability.ASYNC,
        worker_target=WorkerTarget(pull=True),
        attribute_store_names=["warehouse"],
    )
    await client.start_flow(CONFIG_FLOW, flow_id, 7, StartFlowOptions(config_override=config))
    await wait_for_phase(client, flow_id, "Own")
    assert (await client.describe_flow(flow_id)).config == config

    # refused updates change nothing
    with pytest.raises(BadRequestError, match="continue_as_new_threshold"):
        await client.update_flow_config(flow_id, FlowConfig(continue_as_new_threshold=-1))
    with pytest.raises(BadRequestError, match="listening"):
        await client.update_flow_config(
            flow_id, FlowConfig(worker_target=WorkerTarget(address="w:1"))
        )
    assert (await client.describe_flow(flow_id)).config == config

    update = FlowConfig(step_durability=StepDurability.SYNC, attribute_store_names=[])
    await client.update_flow_config(flow_id, update)
    merged = FlowConfig(
        active_step_search_mode=ActiveStepSearchMode.ALL,
        continue_as_new_threshold=100,
        step_durability=StepDurability.SYNC,
        worker_target=WorkerTarget(pull=True),
        attribute_store_names=[],
    )
    assert (await client.describe_flow(flow_id)).config == merged
    await client.invoke_rpc(CONFIG_FLOW.go, flow_id, 1)
    assert (await client.wait_for_flow(flow_id, timeout=20)).single_output(int) == 7

    assert await _durabilities(client, flow_id) == {
        # the Flow's ASYNC applies to a method without an option or a route
        "StepExecuteCompleted Plain-1": "async",
        # a recovery route keeps execute SYNC
        "StepExecuteCompleted Routed-1": "sync",
        "StepWaitForCompleted Own-1": "async",
        # the Step's own option wins
        "StepExecuteCompleted Own-1": "sync",
        # after the update, the Flow's SYNC
        "StepExecuteCompleted Last-1": "sync",
    }
    events = [e for e in await history(client, flow_id) if e.type == "FlowConfigUpdated"]
    assert [payload(e)["update"] for e in events] == [
        {"step_durability": "sync", "attribute_store_names": []}
    ]
    # the closed run keeps its config (dexcli shows it too); a closed Flow takes no update
    assert (await client.describe_flow(flow_id)).config == merged
    shown = json.loads(await asyncio.to_thread(_dexcli, stack, "flow", "show", flow_id))
    assert shown["config"] == {
        "activeStepSearchMode": "all",
        "continueAsNewThreshold": 100,
        "stepDurability": "sync",
        "workerTarget": {"pull": True},
        "attributeStoreNames": [],
    }
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await client.update_flow_config(flow_id, update)


async def test_config_errors_at_start_start_nothing(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("config-bad")
    listening = FlowConfig(worker_target=WorkerTarget(address="worker:9000"))
    with pytest.raises(FeatureNotAvailableError):
        await client.start_flow(
            CONFIG_FLOW, flow_id, 1, StartFlowOptions(config_override=listening)
        )
    negative = FlowConfig(continue_as_new_page_size_bytes=-5)
    with pytest.raises(BadRequestError, match="continue_as_new_page_size_bytes"):
        await client.start_flow(CONFIG_FLOW, flow_id, 1, StartFlowOptions(config_override=negative))
    with pytest.raises(FlowNotFoundError):
        await client.describe_flow(flow_id)
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await client.update_flow_config(flow_id, FlowConfig(continue_as_new_threshold=3))


# --------------------------------------------------------- combinations, conditional complete


async def _picked(client: AsyncClient, flow_id: str) -> Picked:
    async def probe() -> Picked | None:
        value: Picked | None = await client.invoke_rpc(COMBO_FLOW.picked, flow_id)
        return value

    return await async_wait_until(f"Pick of {flow_id} ran", probe, timeout=20)


async def test_any_combination_waits_for_a_whole_group_and_only_it_consumes(
    stack: Stack,
) -> None:
    client = stack.client
    flow_id = unique_id("combo")
    await client.start_flow(COMBO_FLOW, flow_id)
    await wait_for_phase(client, flow_id, "Pick")
    # half of the first group is not enough
    await client.invoke_rpc(COMBO_FLOW.publish, flow_id, {"left": [1]})
    await wait_for_phase(client, flow_id, "Pick")
    await client.invoke_rpc(COMBO_FLOW.publish, flow_id, {"solo": [5]})
    assert await _picked(client, flow_id) == Picked(left=[], right=[], solo=[5], timer=False)
    # the winning group consumed; the first group's message stays queued
    sizes = await client.invoke_rpc(COMBO_FLOW.sizes, flow_id)
    assert sizes == {"left": 1, "right": 0, "solo": 0}
    await client.stop_flow(flow_id)


async def test_any_combination_prefers_the_first_feasible_group(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("combo-order")
    await client.start_flow(COMBO_FLOW, flow_id)
    await wait_for_phase(client, flow_id, "Pick")
    # both groups become feasible in one commit: declaration order decides
    await client.invoke_rpc(COMBO_FLOW.publish, flow_id, {"solo": [9], "right": [2], "left": [1]})
    assert await _picked(client, flow_id) == Picked(left=[1], right=[2], solo=[], timer=False)
    assert await client.invoke_rpc(COMBO_FLOW.sizes, flow_id) == {"left": 0, "right": 0, "solo": 1}
    await client.stop_flow(flow_id)


async def test_any_combination_with_a_skipped_timer(stack: Stack) -> None:
    client = stack.client
    flow_id = unique_id("combo-timer")
    await client.start_flow(COMBO_FLOW, flow_id)
    await wait_for_phase(client, flow_id, "Pick")
    await client.invoke_rpc(COMBO_FLOW.publish, flow_id, {"left": [4]})
    await client.skip_timer(flow_id, StepExecutionId("Pick"), TimerId.by_condition_id("t"))
    # the timer's group also takes up to five left messages
    assert await _picked(client, flow_id) == Picked(left=[4], right=[], solo=[], timer=True)
    await client.stop_flow(flow_id)


async def test_force_complete_if_channels_empty_loops_until_the_channel_is_empty(
    stack: Stack,
) -> None:
    client = stack.client
    flow_id = unique_id("drain")
    await client.start_flow(DRAIN_FLOW, flow_id, [1, 2, 3, 4, 5])
    result = await client.wait_for_flow(flow_id, timeout=30)
    assert result.status is FlowStatus.COMPLETED
    assert result.single_output(int) == 15
    resolved = [
        (payload(e)["context"]["stepExecutionId"], payload(e)["output"].get("resolvedDecision"))
        for e in await history(client, flow_id)
        if e.type == "StepExecuteCompleted" and payload(e)["context"]["stepType"] == "Consume"
    ]
    assert resolved == [
        ("Consume-1", "go_to"),
        ("Consume-2", "go_to"),
        ("Consume-3", "force_complete"),
    ]


async def test_the_sync_client_runs_the_same_calls(stack: Stack) -> None:
    flow_id = unique_id("sync-client")

    def drive() -> int:
        with Client(REGISTRY, options=ClientOptions(server_address=stack.server.address)) as c:
            c.start_flow(GATE_FLOW, flow_id, 1)
            short = WaitForStepCompletionOptions(request_timeout=timedelta(seconds=0.3))
            with pytest.raises(RequestTimeoutError):
                c.wait_for_step_completion(flow_id, StepExecutionId("Hold"), short)
            c.update_flow_config(flow_id, FlowConfig(step_durability=StepDurability.ASYNC))
            c.invoke_rpc(GATE_FLOW.go, flow_id, 2)
            c.wait_for_step_completion(flow_id, StepExecutionId("Hold"))
            c.invoke_rpc(GATE_FLOW.go, flow_id, 3)
            assert c.describe_flow(flow_id).config == FlowConfig(
                step_durability=StepDurability.ASYNC
            )
            return int(c.wait_for_flow(flow_id, timeout=30).single_output(int))

    assert await asyncio.to_thread(drive) == 6
