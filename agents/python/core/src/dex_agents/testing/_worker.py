"""The Worker child process of an agent integration test."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dex import AsyncWorker, Flow, PullWorkerOptions, Registry, WorkerOptions

SERVER_ADDRESS_ENV = "DEX_SERVER_ADDRESS"
READY_FILE_ENV = "DEX_AGENT_WORKER_READY_FILE"
DEFAULT_TASK_SLOTS = 32


def run_agent_worker(
    flows: Sequence[Flow[Any]],
    *,
    max_concurrent_tasks: int = DEFAULT_TASK_SLOTS,
    registration_timeout: float = 30.0,
) -> None:
    """Serve ``flows`` with an ``AsyncWorker`` until SIGTERM or SIGINT: a Worker child's main.

    Reads the server address from env ``DEX_SERVER_ADDRESS``. Once every Flow type is
    registered with the server it writes the file named by env
    ``DEX_AGENT_WORKER_READY_FILE`` (when set), which ``AgentTestStack.start_worker`` waits
    for. SIGTERM and SIGINT stop the Worker gracefully (running tasks drain); SIGKILL is
    what crash tests use.

    Args:
        flows: the agent Flows to serve (for example ``AgentSessionFlow`` instances).
        max_concurrent_tasks: task slots (default 32): enough for the largest batch of
            parallel tool calls plus RPCs.
        registration_timeout: seconds to wait for the first registration (default 30).

    Raises:
        KeyError: ``DEX_SERVER_ADDRESS`` is not set.

    """
    asyncio.run(_serve(list(flows), max_concurrent_tasks, registration_timeout))


async def _serve(
    flows: list[Flow[Any]], max_concurrent_tasks: int, registration_timeout: float
) -> None:
    address = os.environ[SERVER_ADDRESS_ENV]
    registry = Registry(flows, allow_async_handlers=True)
    worker = AsyncWorker(
        registry,
        None,
        WorkerOptions(
            server_address=address,
            pull=PullWorkerOptions(max_concurrent_tasks=max_concurrent_tasks),
        ),
    )
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    serving = asyncio.create_task(worker.start())
    await worker.wait_pull_registered(registration_timeout)
    ready_file = os.environ.get(READY_FILE_ENV)
    if ready_file:
        temporary = Path(ready_file + ".tmp")
        temporary.write_text(str(os.getpid()))
        temporary.replace(ready_file)
    stop_requested = asyncio.create_task(stopping.wait())
    done, _ = await asyncio.wait({serving, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
    if stop_requested in done:
        await worker.stop()
    stop_requested.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
