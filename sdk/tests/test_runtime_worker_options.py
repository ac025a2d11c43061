from __future__ import annotations

import os

import pytest
from dex import (
    AsyncWorker,
    Context,
    Flow,
    PullWorkerOptions,
    Registry,
    Step,
    StepDecision,
    StepList,
    Worker,
    WorkerOptions,
)
from dex.errors import FlowDefinitionError


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
