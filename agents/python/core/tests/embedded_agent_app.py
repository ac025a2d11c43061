"""An application with an embedded Dex server and an in-process agent Worker (a child).

    python -m tests.embedded_agent_app DATABASE READY_FILE

Serves the scenarios named in env ``AGENT_TEST_SCENARIOS`` (built by
``tests.agent_defs``, gates and invocation log under ``AGENT_TEST_STATE_DIR``) with an
``AsyncWorker`` on ``EmbeddedServer.worker_address``, until SIGTERM. Once the Worker has
registered it writes the server's HTTP address to ``READY_FILE``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

from dex import AsyncWorker, PullWorkerOptions, Registry, WorkerOptions
from dex_server.app import ServerConfig
from dex_server.embedded import EmbeddedServer

from tests.agent_defs import flows_from_env


async def main(database: Path, ready_file: Path) -> None:
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    config = ServerConfig(database_path=database, port=0)
    async with EmbeddedServer(config=config) as server:
        options = WorkerOptions(
            server_address=server.worker_address,
            pull=PullWorkerOptions(max_concurrent_tasks=32),
        )
        worker = AsyncWorker(Registry(flows_from_env(), allow_async_handlers=True), None, options)
        serving = asyncio.create_task(worker.start())
        await worker.wait_pull_registered(30)
        temporary = ready_file.with_suffix(".tmp")
        temporary.write_text(server.address)
        temporary.replace(ready_file)
        await stopping.wait()
        await worker.stop()
        await serving


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), Path(sys.argv[2])))
