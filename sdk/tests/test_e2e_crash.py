"""End to end crash tests: SIGKILL Workers and the server at exact points (file gates) and
count, with file logs, how often each Step ran."""

from __future__ import annotations

import asyncio
from pathlib import Path

from dex import FlowStatus

from tests.e2e_flows import crash_flows
from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import (
    e2e_stack,
    free_port,
    history,
    payload,
    unique_id,
    wait_for_phase,
)
from tests.support import FileGate


def _steps(directory: Path, tag: str) -> list[tuple[str, int, int]]:
    """``(step, attempt, pid)`` per logged run."""
    rows = []
    for line in read_log(directory, tag):
        step, attempt, pid = line.split()
        rows.append((step, int(attempt), int(pid)))
    return rows


async def test_worker_killed_mid_execute_after_heartbeat_retries_on_replacement(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path) as stack:
        first = stack.workers[0]
        tag = unique_id("kill-mid")
        await stack.client.start_flow(crash_flows.KILL_MID_EXECUTE, tag, tag)
        await FileGate(tmp_path, f"{tag}-middle").async_wait_until_reached(timeout=15)

        first.kill()
        replacement = await stack.start_worker()
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.status is FlowStatus.COMPLETED
        rows = _steps(tmp_path, tag)
        assert [(s, a) for s, a, _ in rows] == [
            ("before", 1),
            ("middle", 1),
            ("middle", 2),
            ("after", 1),
        ]
        assert rows[1][2] == first.pid and rows[2][2] == replacement.pid
        events = await history(stack.client, tag)
        middle = next(
            payload(e)
            for e in events
            if e.type == "StepExecuteCompleted"
            and payload(e)["context"]["stepExecutionId"] == "Middle-1"
        )
        assert middle["context"]["finalAttempt"] == 2


async def test_worker_dying_before_any_frame_gets_the_same_attempt_redelivered(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path) as stack:
        first = stack.workers[0]
        tag = unique_id("silent")
        await stack.client.start_flow(crash_flows.SILENT_DEATH, tag, tag)
        await FileGate(tmp_path, f"{tag}-silent").async_wait_until_reached(timeout=15)

        first.kill()
        replacement = await stack.start_worker()
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.single_output(int) == 1
        rows = _steps(tmp_path, tag)
        assert rows == [("silent", 1, first.pid), ("silent", 1, replacement.pid)]


async def test_a_heartbeat_is_written_before_it_returns_so_a_blocked_worker_costs_its_attempt(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path) as stack:
        first = stack.workers[0]
        tag = unique_id("blocked")
        await stack.client.start_flow(crash_flows.HEARTBEAT_THEN_BLOCK, tag, tag)
        # the handler blocks the Worker's loop right after its heartbeat returned
        gate = FileGate(tmp_path, f"{tag}-blocking")
        await gate.async_wait_until_reached(timeout=15)

        first.kill()
        gate.release()  # a redelivered attempt 1 would pass it and answer 1
        replacement = await stack.start_worker()
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.single_output(int) == 2
        rows = _steps(tmp_path, tag)
        assert rows == [("blocking", 1, first.pid), ("blocking", 2, replacement.pid)]


async def test_single_attempt_step_killed_after_durable_heartbeat_never_runs_again(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path) as stack:
        first = stack.workers[0]
        tag = unique_id("once")
        await stack.client.start_flow(crash_flows.AT_MOST_ONCE, tag, tag)
        gate = FileGate(tmp_path, f"{tag}-once")
        await gate.async_wait_until_reached(timeout=15)

        first.kill()
        await stack.start_worker()
        gate.release()  # a second run, if there were one, would finish normally
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.status is FlowStatus.COMPLETED
        assert result.single_output(str).startswith("recovered (")
        rows = _steps(tmp_path, tag)
        assert [(s, a) for s, a, _ in rows] == [
            ("once-start", 1),
            ("once-acked", 1),
            ("once-failed", 1),
        ]


async def test_single_attempt_step_with_durable_start_never_reruns_after_server_kill(
    tmp_path: Path,
) -> None:
    """The durable start also holds across a server SIGKILL and restart."""
    async with e2e_stack(tmp_path, port=free_port()) as stack:
        tag = unique_id("once-srv")
        await stack.client.start_flow(crash_flows.AT_MOST_ONCE, tag, tag)
        gate = FileGate(tmp_path, f"{tag}-once")
        await gate.async_wait_until_reached(timeout=15)

        stack.server.kill()
        await stack.server.restart()
        gate.release()
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.single_output(str).startswith("recovered (")
        steps = [s for s, _, _ in _steps(tmp_path, tag)]
        assert steps.count("once-start") == 1
        assert steps.count("once-failed") == 1


async def test_server_killed_and_restarted_loses_and_repeats_nothing_committed(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path, port=free_port()) as stack:
        client = stack.client
        timer_tag = unique_id("timer")
        channel_tag = unique_id("channel")
        steps_tag = unique_id("steps")
        for tag in (timer_tag, channel_tag, steps_tag):
            await client.start_flow(crash_flows.DURABLE, tag, tag)
        await wait_for_phase(client, timer_tag, "TimerWait", "waiting")
        await wait_for_phase(client, channel_tag, "BellWait", "waiting")
        gate = FileGate(tmp_path, f"{steps_tag}-gated")
        await gate.async_wait_until_reached(timeout=15)

        # the 2 s Timer is still pending when the server dies
        await wait_for_phase(client, timer_tag, "TimerWait", "waiting")
        assert "timer-fired" not in [s for s, _, _ in _steps(tmp_path, timer_tag)]
        stack.server.kill()
        gate.release()  # GatedStep finishes while the server is down: its result is lost
        await stack.server.restart()

        await client.invoke_rpc(crash_flows.DURABLE.ring, channel_tag, "ding")
        results = await asyncio.gather(
            *(client.wait_for_flow(t, timeout=30) for t in (timer_tag, channel_tag, steps_tag))
        )
        assert results[0].single_output(bool) is True
        assert results[1].single_output(str) == "ding"
        assert results[2].single_output(str) == "final"

        timer_steps = [s for s, _, _ in _steps(tmp_path, timer_tag)]
        assert timer_steps == ["start", "timer-wait", "timer-fired"]
        channel_steps = [s for s, _, _ in _steps(tmp_path, channel_tag)]
        assert channel_steps == ["start", "bell-wait", "bell-rang"]
        gated = [s for s, _, _ in _steps(tmp_path, steps_tag)]
        # committed Steps exactly once; the uncommitted GatedStep ran once or twice
        assert gated.count("start") == 1
        assert gated.count("final") == 1
        assert gated.count("gated") in (1, 2)
        events = await history(client, steps_tag)
        done = [
            payload(e)["context"]["stepExecutionId"]
            for e in events
            if e.type == "StepExecuteCompleted"
        ]
        assert done == ["DurableStart-1", "GatedStep-1", "Final-1"]
