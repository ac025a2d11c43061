"""A Flow on an embedded Dex server survives the death of its whole process.

    uv run python examples/embedded_flow/run.py

The application below runs the Dex server inside its own process (``EmbeddedServer``, a
SQLite file) with its Worker linked in-process (``inproc://shop``): no server to start,
no socket between the Worker and the server. This script runs that application twice as a
child process:

1. the first run starts an order Flow (Reserve -> Charge -> Ship) and is SIGKILLed inside
   the Charge Step: server and Worker die together;
2. the second run opens the same SQLite file; the server redelivers the Charge attempt
   that was cut off, the Flow finishes, and Reserve, which had completed, did not run again.

It prints how many times each Step ran, and the address of the run's HTTP API, where
``dexcli --server ADDRESS flow list`` and Dex Web (``http://ADDRESS/ui``) would look while
the application runs.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import dex
from dex_server.embedded import EmbeddedServer

FLOW_ID = "order-1001"
STEPS = ("Reserve", "Charge", "Ship")


class Shop:
    """Where the Steps note what they do (a file, so that both runs add to it)."""

    log: Path
    kill_in_charge = False

    @classmethod
    def ran(cls, step: str) -> None:
        with cls.log.open("a") as out:
            out.write(f"{step}\n")


class Reserve(dex.Step[str]):
    async def execute(self, context: dex.Context, input: str) -> dex.StepDecision:
        Shop.ran("Reserve")
        return dex.StepDecision.go_to(Charge, input)


class Charge(dex.Step[str]):
    async def execute(self, context: dex.Context, input: str) -> dex.StepDecision:
        Shop.ran("Charge")
        if Shop.kill_in_charge:
            # the whole application dies here, in the middle of the Step
            os.kill(os.getpid(), signal.SIGKILL)
        return dex.StepDecision.go_to(Ship, input)


class Ship(dex.Step[str]):
    async def execute(self, context: dex.Context, input: str) -> dex.StepDecision:
        Shop.ran("Ship")
        return dex.StepDecision.graceful_complete(f"{input} shipped")


class OrderFlow(dex.Flow[str]):
    def get_steps(self) -> dex.StepList[str]:
        return dex.StepList.start_step(Reserve()).other_steps(Charge(), Ship())


ORDER = OrderFlow()


async def application(database: Path, first_run: bool) -> None:
    """The embedded application: server, in-process Worker and a client, one process."""
    Shop.kill_in_charge = first_run
    registry = dex.Registry([ORDER], allow_async_handlers=True)
    async with EmbeddedServer(database_path=database, name="shop") as server:
        print(f"  [application pid {os.getpid()}] Dex server at {server.address}", flush=True)
        worker = dex.AsyncWorker(
            registry, options=dex.WorkerOptions(server_address=server.worker_address)
        )
        serving = asyncio.create_task(worker.start())
        async with dex.AsyncClient(
            registry, options=dex.ClientOptions(server_address=server.worker_address)
        ) as client:
            if first_run:
                await client.start_flow(ORDER, FLOW_ID, "order 1001")
            result = await client.wait_for_flow(FLOW_ID, timeout=60)
            print(f"  [application] the Flow finished: {result.single_output(str)!r}")
        await worker.close()
        await serving


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--application":
        Shop.log = Path(sys.argv[3])
        asyncio.run(application(Path(sys.argv[2]), first_run=sys.argv[4] == "first"))
        return 0
    with tempfile.TemporaryDirectory(prefix="dex-embedded-") as folder:
        database, log = Path(folder) / "shop.sqlite3", Path(folder) / "steps.log"
        runs = []
        for label in ("first", "second"):
            print(f"{label} run of the application:", flush=True)
            command = [sys.executable, __file__, "--application", str(database), str(log), label]
            runs.append(subprocess.run(command, timeout=120).returncode)
        ran = Counter(log.read_text().split())
        print("Step runs:", ", ".join(f"{step} {ran[step]}" for step in STEPS))
        expected = {"Reserve": 1, "Charge": 2, "Ship": 1}
        ok = runs == [-signal.SIGKILL, 0] and dict(ran) == expected
        if ok:
            print(
                "The first run was killed inside Charge; the second resumed from the SQLite file:"
                " Charge ran again (its attempt was cut off), Reserve did not."
            )
        else:
            print(f"unexpected: exit codes {runs}, Step runs {dict(ran)}, wanted {expected}")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
