from __future__ import annotations

import dataclasses
import os
from datetime import timedelta

import msgspec
import pytest
from dex import (
    AsyncWorker,
    Context,
    Flow,
    PullQueueRegistrationState,
    PullRegistrationState,
    PullWorkerOptions,
    Registry,
    Step,
    StepDecision,
    StepList,
    Worker,
    WorkerOptions,
    WorkerTarget,
)
from dex._protocol import Task
from dex.errors import FeatureNotAvailableError, FlowDefinitionError


class AsyncStep(Step[int]):
    async def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input)


class AsyncFlow(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(AsyncStep())


def test_pull_defaults() -> None:
    options = PullWorkerOptions()
    assert options.resolved_max_tasks() == 100  # an AsyncWorker's default
    assert options.resolved_max_tasks(7) == 7
    assert options.resolved_reserved_rpc_tasks() == 1
    assert PullWorkerOptions(max_concurrent_tasks=1).resolved_reserved_rpc_tasks() == 0
    assert PullWorkerOptions(max_concurrent_tasks=2).resolved_reserved_rpc_tasks() == 1
    assert PullWorkerOptions(max_concurrent_tasks=8).resolved_reserved_rpc_tasks() == 1
    assert options.resolved_drain_timeout() == 30.0
    assert PullWorkerOptions(stop_drain_timeout=2.5).resolved_drain_timeout() == 2.5


def test_reserved_rpc_tasks_must_be_below_the_limit() -> None:
    with pytest.raises(ValueError, match="reserved_rpc_tasks"):
        PullWorkerOptions(
            max_concurrent_tasks=2, reserved_rpc_tasks=2
        ).resolved_reserved_rpc_tasks()
    assert (
        PullWorkerOptions(
            max_concurrent_tasks=4, reserved_rpc_tasks=3
        ).resolved_reserved_rpc_tasks()
        == 3
    )


def test_app_worker_id() -> None:
    generated = {PullWorkerOptions().resolved_app_worker_id() for _ in range(5)}
    assert len(generated) == 5  # a fresh id per Worker
    for value in generated:
        assert 1 <= len(value) <= 63
        assert all(c.isalnum() or c in "._-" for c in value)
    assert PullWorkerOptions(app_worker_id="w-1").resolved_app_worker_id() == "w-1"
    with pytest.raises(ValueError):
        PullWorkerOptions(app_worker_id="bad id!").resolved_app_worker_id()


def test_worker_slots_and_register_frame() -> None:
    registry = Registry([AsyncFlow()], allow_async_handlers=True)
    worker = AsyncWorker(
        registry,
        options=WorkerOptions(pull=PullWorkerOptions(max_concurrent_tasks=3, app_worker_id="w")),
    )
    frame = worker.register_frame()
    assert (frame.app_worker_id, frame.max_concurrent_tasks, frame.reserved_rpc_tasks) == (
        "w",
        3,
        1,
    )
    assert [f.flow_type for f in frame.flows] == ["AsyncFlow"]
    assert worker.max_step_tasks == 2


class SyncStep(Step[int]):
    def execute(self, context: Context, input: int) -> StepDecision:
        return StepDecision.graceful_complete(input)


class SyncFlow(Flow[int]):
    def get_steps(self) -> StepList[int]:
        return StepList.start_step(SyncStep())


def test_default_slots_run_many_handlers_at_once() -> None:
    """By default an AsyncWorker has 100 slots, a sync Worker one thread per slot."""
    async_worker = AsyncWorker(Registry([AsyncFlow()], allow_async_handlers=True))
    assert (async_worker.max_tasks, async_worker.max_step_tasks) == (100, 99)
    sync_worker = Worker(Registry([SyncFlow()]))
    frame = sync_worker._worker.register_frame()
    assert frame.max_concurrent_tasks == max(16, 4 * (os.cpu_count() or 1))
    assert frame.reserved_rpc_tasks == 1
    explicit = Worker(
        Registry([SyncFlow()]),
        options=WorkerOptions(pull=PullWorkerOptions(max_concurrent_tasks=3)),
    )
    assert explicit._worker.register_frame().max_concurrent_tasks == 3


def test_sync_worker_rejects_async_handlers() -> None:
    registry = Registry([AsyncFlow()], allow_async_handlers=True)
    with pytest.raises(FlowDefinitionError, match="AsyncWorker"):
        Worker(registry)


# --------------------------------------------------------------------------- Dex model shapes


def test_options_take_the_model_positional_order() -> None:
    pull = PullWorkerOptions(8, 2, "w-1", timedelta(seconds=5), True, 3)
    assert (
        pull.max_concurrent_tasks,
        pull.idle_streams_per_queue,
        pull.app_worker_id,
        pull.stop_drain_timeout,
        pull.stop_on_permanent_stream_rejection,
        pull.reserved_rpc_tasks,
    ) == (8, 2, "w-1", timedelta(seconds=5), True, 3)
    assert PullWorkerOptions().stop_drain_timeout == timedelta(0)
    defaults = WorkerOptions()
    assert (
        defaults.bind_address,
        defaults.worker_target,
        defaults.server_address,
        defaults.attribute_index_sync_timeout,
        defaults.pull,
        defaults.credential,
    ) == (":8803", None, "localhost:8801", timedelta(minutes=2), None, None)
    options = WorkerOptions(":8803", None, "h:1", timedelta(seconds=9), None, "tok")
    assert (options.server_address, options.attribute_index_sync_timeout) == (
        "h:1",
        timedelta(seconds=9),
    )
    assert options.credential == "tok"
    target = WorkerTarget("w:8803", True)
    assert (target.address, target.headless, target.pull) == ("w:8803", True, False)


def test_durations_accept_timedelta_and_seconds() -> None:
    assert PullWorkerOptions(stop_drain_timeout=timedelta(seconds=4)).resolved_drain_timeout() == 4
    assert PullWorkerOptions(stop_drain_timeout=2.5).resolved_drain_timeout() == 2.5
    assert PullWorkerOptions(stop_drain_timeout=timedelta(0)).resolved_drain_timeout() == 30.0
    with pytest.raises(ValueError, match="stop_drain_timeout"):
        PullWorkerOptions(stop_drain_timeout=timedelta(seconds=-1))
    assert WorkerOptions(attribute_index_sync_timeout=5).attribute_index_sync_timeout == 5
    for bad in (timedelta(0), -1.0, float("inf")):
        with pytest.raises(ValueError, match="attribute_index_sync_timeout"):
            WorkerOptions(attribute_index_sync_timeout=bad)


def test_pull_options_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="reserved_rpc_tasks"):
        PullWorkerOptions(max_concurrent_tasks=2, reserved_rpc_tasks=5)
    with pytest.raises(ValueError, match="max_concurrent_tasks"):
        PullWorkerOptions(max_concurrent_tasks=-1)
    with pytest.raises(ValueError, match="app_worker_id"):
        PullWorkerOptions(app_worker_id="bad id")
    assert PullWorkerOptions(reserved_rpc_tasks=5).reserved_rpc_tasks == 5  # limit unset yet


def test_pull_mode_and_listening_settings() -> None:
    pull = PullWorkerOptions()
    for listening in ({"bind_address": ":9000"}, {"bind_address": ":8803"}):
        with pytest.raises(ValueError, match="bind_address or worker_target"):
            WorkerOptions(pull=pull, **listening)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="bind_address or worker_target"):
        WorkerOptions(pull=pull, worker_target=WorkerTarget(pull=True))
    with pytest.raises(ValueError, match="pull"):
        WorkerTarget("h:1", pull=True)
    replaced = dataclasses.replace(WorkerOptions(pull=pull), server_address="h:2")
    assert replaced.server_address == "h:2"  # the default bind address stays "unset"
    registry = Registry([SyncFlow()])
    for listening_options in (
        WorkerOptions(bind_address=":9000"),
        WorkerOptions(worker_target=WorkerTarget("w:8803")),
        WorkerOptions(worker_target=WorkerTarget(headless=True)),
    ):
        with pytest.raises(FeatureNotAvailableError, match="listening Workers"):
            Worker(registry, None, listening_options)
        with pytest.raises(FeatureNotAvailableError):
            AsyncWorker(registry, None, listening_options)
    # these ask for nothing only a listening Worker does: served by pulling
    for options in (WorkerOptions(), WorkerOptions(worker_target=WorkerTarget(pull=True))):
        assert Worker(registry, None, options).worker_target == WorkerTarget(pull=True)


def test_options_none_and_attributes() -> None:
    registry = Registry([SyncFlow()])
    worker = Worker(registry, None, None)
    assert worker.options == WorkerOptions()
    assert worker.registry is registry and worker.blob_cache is None
    assert worker.pull_reserved_rpc_declines == 0
    state = worker.pull_registration_state()
    assert state == PullRegistrationState(
        False,
        (
            PullQueueRegistrationState(worker.app_worker_id, False, None),
            PullQueueRegistrationState("SyncFlow", False, None),
        ),
    )
    async_worker = AsyncWorker(registry, None, WorkerOptions(pull=None))
    assert async_worker.max_tasks == 100  # pull=None: PullWorkerOptions()


def test_sync_worker_close_before_start() -> None:
    with Worker(Registry([SyncFlow()])) as worker:
        worker.stop()  # before start(): returns at once
    worker.close()
    with pytest.raises(RuntimeError, match="closed"):
        worker.start()


async def test_async_worker_close_before_start() -> None:
    async with AsyncWorker(Registry([SyncFlow()])) as worker:
        assert worker.pull_registration_state().is_ready is False
    await worker.close()
    with pytest.raises(RuntimeError, match="closed"):
        await worker.start()


async def test_step_tasks_declined_for_the_rpc_reserve_are_counted() -> None:
    worker = AsyncWorker(Registry([SyncFlow()]), None, WorkerOptions(pull=PullWorkerOptions(2)))
    session = worker._session
    session._steps_running = worker.max_step_tasks  # the only Step slot is busy
    task = Task(task_id="t1", kind="execute", flow_type="SyncFlow", flow_id="f", run_id="r")
    session._on_task(task)
    assert worker.pull_reserved_rpc_declines == 1
    assert worker.stats.tasks_rejected == 1
    sent = [msgspec.json.decode(data) for _, data, _ in session._out]
    assert [(frame["task_id"], frame["reason"]) for frame in sent] == [("t1", "no_capacity")]
    session._on_task(msgspec.structs.replace(task, task_id="t2", flow_type="Unknown"))
    assert worker.pull_reserved_rpc_declines == 1  # other declines are not counted there
