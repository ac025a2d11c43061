"""Worker gaps end to end: a real server, Worker children SIGKILLed at file gates, and the
default task slots of an ``AsyncWorker``.

A ready Step waits for a Worker as long as it takes (no dispatch deadline by default);
``schedule_to_start_timeout`` bounds that wait when a Flow or Step asks for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from dex import (
    AsyncClient,
    ClientOptions,
    Flow,
    FlowStatus,
    Registry,
    StepList,
    StepMovement,
    StepOptions,
)
from dex._spec import movement_wire
from dex_server.testing import RunningServer, running_server

from tests.e2e_flows import gap_flows
from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import unique_id
from tests.support import FileGate, WorkerProcess

_FACTORY = "tests.e2e_flows.gap_flows:registry"


@contextlib.asynccontextmanager
async def _stack(directory: Path) -> AsyncIterator[tuple[RunningServer, AsyncClient]]:
    async with running_server(directory / "server") as server:
        client = AsyncClient(
            gap_flows.client_registry(),
            options=ClientOptions(server_address=server.address, timeout=60),
        )
        try:
            yield server, client
        finally:
            await client.close()


async def _worker(
    server: RunningServer, directory: Path, slots: int | None = None
) -> WorkerProcess:
    """A registered Worker child (by default with the SDK's default task slots)."""
    worker = WorkerProcess(
        _FACTORY, server_address=server.address, gate_dir=directory, max_concurrent_tasks=slots
    )
    await asyncio.to_thread(worker.start)
    return worker


async def test_three_steps_run_at_once_on_a_default_async_worker(tmp_path: Path) -> None:
    """Three Steps on one AsyncWorker with default options run side by side (each waits
    until all three started), on any number of CPUs."""
    async with _stack(tmp_path) as (server, client):
        with await _worker(server, tmp_path):
            group = unique_id("side")
            ids = [f"{group}.{n}" for n in range(3)]
            for flow_id in ids:
                await client.start_flow(gap_flows.SIDE, flow_id, flow_id)
            for flow_id in ids:
                await FileGate(tmp_path, flow_id).async_wait_until_reached(timeout=30)
            FileGate(tmp_path, f"{group}-go").release()
            for flow_id in ids:
                result = await client.wait_for_flow(flow_id, timeout=30)
                assert result.single_output(str) == flow_id


async def test_steps_wait_while_their_only_worker_is_down(tmp_path: Path) -> None:
    """Fault: the only Worker is SIGKILLed mid-Step and no Worker runs for 12 s (longer
    than the 10 s the server used to allow). Promise: a Step that sent no frame runs again
    at the same attempt, one that had heartbeated fails that attempt once
    (``WORKER_CONNECTION_LOST``) and its retry waits for the next Worker: neither spends
    attempts while no Worker is up."""
    async with _stack(tmp_path) as (server, client):
        with await _worker(server, tmp_path) as first:
            once, turn = unique_id("once"), unique_id("turn")
            await client.start_flow(gap_flows.ONCE, once, once)
            await client.start_flow(gap_flows.TURN, turn, turn)
            await FileGate(tmp_path, f"{once}-unattended").async_wait_until_reached(timeout=30)
            await FileGate(tmp_path, f"{turn}-model").async_wait_until_reached(timeout=30)
            first.kill()
        await asyncio.sleep(12.0)  # the scenario: no Worker at all for 12 s
        with await _worker(server, tmp_path) as second:
            once_result = await client.wait_for_flow(once, timeout=60)
            turn_result = await client.wait_for_flow(turn, timeout=60)
        assert once_result.status is FlowStatus.COMPLETED, once_result
        assert once_result.single_output(int) == 1
        assert [line.split()[:2] for line in read_log(tmp_path, once)] == [
            ["unattended", "1"],
            ["unattended", "1"],
        ]
        assert turn_result.status is FlowStatus.COMPLETED, turn_result
        assert turn_result.single_output(int) == 2
        pids = [line.split()[2] for line in read_log(tmp_path, turn)]
        assert pids == [str(first.pid), str(second.pid)]


async def test_a_worker_still_finishing_a_timed_out_attempt_gets_the_retry(
    tmp_path: Path,
) -> None:
    """Fault: an attempt times out and its handler takes 3 s to honour the cancel; its
    Worker (one Step slot) answers ``no_capacity`` to the retry. Promise: the rejection is
    temporary: the same Worker gets the retry once it is free, and the Flow completes."""
    async with _stack(tmp_path) as (server, client):
        with await _worker(server, tmp_path, slots=2):
            flow_id = unique_id("slow")
            await client.start_flow(gap_flows.SLOW, flow_id, flow_id)
            result = await client.wait_for_flow(flow_id, timeout=60)
        assert result.status is FlowStatus.COMPLETED, result
        assert result.single_output(int) == 2
        attempts = [line.split()[1] for line in read_log(tmp_path, flow_id)]
        assert attempts == ["1", "2"]


async def test_a_flow_schedule_to_start_timeout_fails_its_unserved_steps(
    tmp_path: Path,
) -> None:
    """``Flow.get_schedule_to_start_timeout`` (1 s) bounds the wait of its Steps: with no
    Worker for the Flow type, each of its two attempts fails with
    ``SCHEDULE_TO_START_TIMEOUT`` naming the timeout and the Flow type."""
    async with _stack(tmp_path) as (server, client):
        with await _worker(server, tmp_path):  # serves other Flow types only
            flow_id = unique_id("impatient")
            await client.start_flow(gap_flows.IMPATIENT, flow_id, "x")
            result = await client.wait_for_flow(flow_id, timeout=60)
        assert result.status is FlowStatus.FAILED, result
        message = result.error_message or ""
        assert "SCHEDULE_TO_START_TIMEOUT" in message, result
        assert "schedule_to_start_timeout=1s" in message and "'Impatient'" in message, result


# --------------------------------------------------------------------------- the options


class _Plain(gap_flows.Quick):
    def get_step_type(self) -> str:
        return "Plain"


class _Own(gap_flows.Quick):
    def get_step_type(self) -> str:
        return "Own"

    def get_step_options(self) -> StepOptions:
        return StepOptions(schedule_to_start_timeout=timedelta(seconds=5))


class _Defaulted(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(_Plain()).other_steps(_Own())

    def get_schedule_to_start_timeout(self) -> timedelta | float | None:
        return 2.5


def _options(flow: Flow[str]) -> dict[str, float | None]:
    spec = Registry([flow]).flow_entry(flow.get_flow_type()).spec
    assert spec is not None
    return {s.step_type: s.options.schedule_to_start_timeout_s for s in spec.steps}


def test_schedule_to_start_timeout_reaches_the_flow_spec() -> None:
    """A Step's own option wins; the Flow's default fills Steps (and movements) without."""
    assert _options(_Defaulted()) == {"Plain": 2.5, "Own": 5.0}
    assert _options(gap_flows.ONCE) == {"Unattended": None}
    entry = Registry([_Defaulted()]).flow_entry("_Defaulted")
    moved = movement_wire(StepMovement.of(_Own, "x", options=StepOptions()), entry)
    assert moved.options is not None and moved.options.schedule_to_start_timeout_s == 2.5


@pytest.mark.parametrize("bad", [0, -1.0, math.inf, math.nan, timedelta(0)])
def test_schedule_to_start_timeout_must_be_finite_and_positive(bad: float | timedelta) -> None:
    with pytest.raises(ValueError, match="schedule_to_start_timeout"):
        StepOptions(schedule_to_start_timeout=bad)
