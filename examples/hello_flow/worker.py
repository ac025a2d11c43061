"""Run a Worker for OrderFlow: ``python examples/hello_flow/worker.py``.

Connects to ``$DEX_SERVER_ADDRESS`` (default ``localhost:8801``) and serves until SIGINT or
SIGTERM, then stops gracefully.
"""

from __future__ import annotations

import asyncio
import os

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
    await worker.run()  # SIGINT / SIGTERM: graceful stop


if __name__ == "__main__":
    asyncio.run(serve())
