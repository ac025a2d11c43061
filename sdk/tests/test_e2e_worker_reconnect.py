"""Worker connection blips: a TCP proxy between the Worker child and the server is cut.

A real server process, a real Worker child connected through ``TcpProxy``, and a Client
connected to the server directly (it keeps working during the cut). Steps log every
attempt's start, end and cancellation to a file, so each test counts side effects.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from dex import FlowStatus
from dex_server.testing import TcpProxy

from tests.e2e_flows import crash_flows, reconnect_flows
from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import (
    ALL_FLOWS,
    Stack,
    active_steps,
    e2e_stack,
    history,
    payload,
    unique_id,
)
from tests.support import FileGate, WorkerProcess, async_wait_until

# a blip: the connection is down this long (the fault itself, not a wait for a result)
_BLIP_S = 1.0


@contextlib.asynccontextmanager
async def _proxied(
    directory: Path, grace_s: float | None = None
) -> AsyncIterator[tuple[Stack, TcpProxy]]:
    """A server (its ``worker_reconnect_grace_s``: ``grace_s``, None: the default) and one
    Worker child whose WebSocket goes through a ``TcpProxy``."""
    overrides: dict[str, object] = {}
    if grace_s is not None:
        overrides["worker_reconnect_grace_s"] = grace_s
    async with e2e_stack(directory, workers=0, token=None, **overrides) as stack:
        host, port = stack.server.address.rsplit(":", 1)
        proxy = TcpProxy((host, int(port)))
        try:
            worker = WorkerProcess(
                ALL_FLOWS,
                server_address=f"127.0.0.1:{proxy.port}",
                gate_dir=directory,
                max_concurrent_tasks=16,
            )
            stack.workers.append(worker)
            await asyncio.to_thread(worker.start)
            yield stack, proxy
        finally:
            proxy.close()


async def _blip(proxy: TcpProxy) -> None:
    """Cut the Worker's connection for ``_BLIP_S`` and wait until it connected again."""
    accepted = proxy.accepted
    proxy.cut()
    await asyncio.sleep(_BLIP_S)
    proxy.restore()

    async def reconnected() -> bool | None:
        return proxy.accepted > accepted or None

    await async_wait_until("the Worker reconnected through the proxy", reconnected, timeout=20)


async def _completions(stack: Stack, flow_id: str, execution_id: str) -> list[int]:
    """``finalAttempt`` of every StepExecuteCompleted event of ``execution_id``."""
    return [
        payload(e)["context"]["finalAttempt"]
        for e in await history(stack.client, flow_id)
        if e.type == "StepExecuteCompleted"
        and payload(e)["context"]["stepExecutionId"] == execution_id
    ]


def _gave_up(stack: Stack, flow_id: str) -> Callable[[], Awaitable[bool | None]]:
    """Probe: the server failed attempt 1 of Work as WORKER_CONNECTION_LOST."""

    async def probe() -> bool | None:
        for step in await active_steps(stack.client, flow_id):
            failure = step.last_failure
            if step.step_type == "Work" and step.attempt == 2 and failure is not None:
                return failure.error_type == "WORKER_CONNECTION_LOST" or None
        return None

    return probe


async def test_blip_during_a_step_resumes_its_attempt_on_the_new_connection(
    tmp_path: Path,
) -> None:
    async with _proxied(tmp_path) as (stack, proxy):
        tag = unique_id("blip")
        await stack.client.start_flow(reconnect_flows.BLIP, tag, tag)
        gate = FileGate(tmp_path, f"{tag}-work")
        await gate.async_wait_until_reached(timeout=15)

        # the handler goes on while the connection is down: its durable heartbeat waits
        # for the reconnect, its result is sent on the new connection
        accepted = proxy.accepted
        proxy.cut()
        gate.release()
        await asyncio.sleep(_BLIP_S)
        proxy.restore()
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.status is FlowStatus.COMPLETED
        assert proxy.accepted > accepted  # it really reconnected
        assert read_log(tmp_path, tag) == ["work 1 start", "work 1 end", "done 1 end"]
        assert await _completions(stack, tag, "Work-1") == [1]
        # its Stream write, made while the connection was down, arrived after the resume
        note = await stack.client.read_stream(tag, reconnect_flows.NOTES, timeout=10)
        assert (note.value, note.source) == ("attempt 1", "#Work-1")


async def test_blip_after_a_durable_start_keeps_the_single_attempt(tmp_path: Path) -> None:
    async with _proxied(tmp_path) as (stack, proxy):
        tag = unique_id("once-blip")
        await stack.client.start_flow(crash_flows.AT_MOST_ONCE, tag, tag)
        gate = FileGate(tmp_path, f"{tag}-once")
        await gate.async_wait_until_reached(timeout=15)

        await _blip(proxy)
        gate.release()
        result = await stack.client.wait_for_flow(tag, timeout=30)

        # not failed as WORKER_CONNECTION_LOST (that would run OnceFailed and recover)
        assert result.single_output(str) == "ran"
        steps = [line.rsplit(" ", 1)[0] for line in read_log(tmp_path, tag)]
        assert steps == ["once-start 1", "once-acked 1"]
        assert await _completions(stack, tag, "OnceOnly-1") == [1]


async def test_blip_longer_than_the_grace_period_redelivers_and_commits_once(
    tmp_path: Path,
) -> None:
    async with _proxied(tmp_path, grace_s=1.0) as (stack, proxy):
        # ``finished``: its handler ends during the cut, its result waits for a resume;
        # ``parked``: its handler is still at its gate when the server gives up on it
        finished, parked = unique_id("quick-long"), unique_id("long")
        for tag in (finished, parked):
            await stack.client.start_flow(reconnect_flows.BLIP, tag, tag)
        for tag in (finished, parked):
            await FileGate(tmp_path, f"{tag}-work").async_wait_until_reached(timeout=15)

        proxy.cut()
        FileGate(tmp_path, f"{finished}-work").release()

        for tag in (finished, parked):
            await async_wait_until(f"attempt 1 of {tag} failed", _gave_up(stack, tag), 20)
        proxy.restore()
        for tag in (finished, parked):
            result = await stack.client.wait_for_flow(tag, timeout=30)
            assert result.status is FlowStatus.COMPLETED

        # attempt 1 of ``finished`` ran to its end, but its late result did not commit
        assert Counter(read_log(tmp_path, finished)) == Counter(
            ["work 1 start", "work 1 end", "work 2 start", "work 2 end", "done 1 end"]
        )
        # the Worker stopped the stale handler of ``parked``
        assert Counter(read_log(tmp_path, parked)) == Counter(
            ["work 1 start", "work 1 cancelled", "work 2 start", "work 2 end", "done 1 end"]
        )
        for tag in (finished, parked):
            assert await _completions(stack, tag, "Work-1") == [2]
            # attempt 1's Stream write of ``finished`` waited for a resume that was refused
            note = await stack.client.read_stream(tag, reconnect_flows.NOTES, timeout=10)
            assert note.value == "attempt 2"
