"""Run a Worker for OrderFlow: ``python examples/hello_flow/worker.py``.

Connects to ``$DEX_SERVER_ADDRESS`` (default ``localhost:8801``) and serves until SIGINT or
SIGTERM, then stops gracefully.
"""

from __future__ import annotations

import asyncio
import os
import signal

import dex
from order_flow import registry


async def serve() -> None:
    worker = dex.AsyncWorker(
        registry(),
        options=dex.WorkerOptions(
            server_address=os.environ.get("DEX_SERVER_ADDRESS", "localhost:8801"),
            pull=dex.PullWorkerOptions(max_concurrent_tasks=4),
        ),
    )
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, lambda: stopping.append(loop.create_task(worker.stop())))
    await worker.start()
    for task in stopping:
        await task


if __name__ == "__main__":
    asyncio.run(serve())
