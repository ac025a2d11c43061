"""An application with an embedded Dex server and an in-process Worker (run as a child).

    python _embedded_app.py DATABASE ADDRESS_FILE RUN_LOG [GATE_DIR]

Serves the ``Pipeline`` Flow (Steps ``One`` -> ``Two`` -> ``Three`` -> ``Four``) until
SIGTERM. Every Step appends ``<name> <flow_id>`` to ``RUN_LOG`` when it starts. With
``GATE_DIR``, ``Three`` creates ``GATE_DIR/entered`` and then waits forever, so the test
can kill the process at that exact point inside the Step.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import dex
from dex_server.app import ServerConfig
from dex_server.embedded import EmbeddedServer

# set by main(); imported by a test, the Steps only run
RUN_LOG: Path | None = None
GATE: Path | None = None


def _ran(name: str, ctx: dex.Context) -> None:
    if RUN_LOG is None:
        return
    with RUN_LOG.open("a") as log:
        log.write(f"{name} {ctx.flow_id}\n")


class One(dex.Step[int]):
    async def execute(self, ctx: dex.Context, value: int) -> dex.StepDecision:
        _ran("One", ctx)
        return dex.StepDecision.go_to(Two, value + 1)


class Two(dex.Step[int]):
    async def execute(self, ctx: dex.Context, value: int) -> dex.StepDecision:
        _ran("Two", ctx)
        return dex.StepDecision.go_to(Three, value + 1)


class Three(dex.Step[int]):
    async def execute(self, ctx: dex.Context, value: int) -> dex.StepDecision:
        _ran("Three", ctx)
        if GATE is not None:
            (GATE / "entered").touch()
            await asyncio.Event().wait()  # the test kills the process here
        return dex.StepDecision.go_to(Four, value + 1)


class Four(dex.Step[int]):
    async def execute(self, ctx: dex.Context, value: int) -> dex.StepDecision:
        _ran("Four", ctx)
        return dex.StepDecision.graceful_complete()


class Pipeline(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(One()).other_steps(Two(), Three(), Four())


PIPELINE = Pipeline()


async def main() -> None:
    global RUN_LOG, GATE
    RUN_LOG = Path(sys.argv[3])
    GATE = Path(sys.argv[4]) if len(sys.argv) > 4 else None
    config = ServerConfig(database_path=Path(sys.argv[1]), port=0, address_file=Path(sys.argv[2]))
    async with EmbeddedServer(config=config) as server:
        worker = dex.AsyncWorker(
            dex.Registry([PIPELINE], allow_async_handlers=True),
            options=dex.WorkerOptions(server_address=server.worker_address),
        )
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        serving = asyncio.create_task(worker.start())
        await stop.wait()
        await worker.close()
        await serving


if __name__ == "__main__":
    asyncio.run(main())
