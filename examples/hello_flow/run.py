"""The hello_flow demo: a Flow survives the death of its Worker in the middle of a Step.

    uv run python examples/hello_flow/run.py [--keep]

1. starts ``dexcli dev`` on a temporary data folder (a real server, SQLite, free port);
2. starts a Worker process and an OrderFlow;
3. SIGKILLs the Worker while it is inside the ChargePayment Step;
4. starts a replacement Worker, which picks up ChargePayment again;
5. after the Timer, sends the tracking number through the ``confirm_shipment`` RPC;
6. shows that the Flow completed and that no completed Step ran a second time.

With ``--keep`` the server stays up at the end (Ctrl-C stops it) so you can look at the
Flow with ``dexcli``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import dex
from order_flow import COOLING_OFF, ORDER_FLOW, Order, registry
from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
STEPS = ["ReserveStock", "ChargePayment", "CoolingOff", "AwaitShipment"]
console = Console(highlight=False)


def dexcli() -> list[str]:
    """The dexcli command of this environment (the console script, else the module)."""
    script = Path(sys.executable).parent / "dexcli"
    if script.exists():
        return [str(script)]
    found = shutil.which("dexcli")
    return [found] if found else [sys.executable, "-m", "dex_server.cli"]


def step(text: str) -> None:
    console.print(f"[bold cyan]>[/] {text}")


def done(text: str) -> None:
    console.print(f"  [green]✓[/] {text}")


async def poll(what: str, probe: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    """Wait until ``probe()`` is true, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with console.status(what):
        while not await probe():
            if time.monotonic() > deadline:
                raise TimeoutError(f"timed out after {timeout:.0f}s: {what}")
            await asyncio.sleep(0.02)


class Processes:
    """The child processes of the demo, each in its own process group."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.children: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")
        proc = subprocess.Popen(
            cmd,
            env={**os.environ, **env},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.children.append(proc)
        return proc

    def log(self, name: str) -> str:
        path = self.workdir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_all(self) -> None:
        for proc in reversed(self.children):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
        for proc in self.children:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def journal_counts(path: Path) -> dict[str, dict[str, int]]:
    counts = {s: {"started": 0, "finished": 0, "workers": 0} for s in STEPS}
    pids: dict[str, set[str]] = {s: set() for s in STEPS}
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        step_type, event, _execution, _attempt, pid = line.split()
        if event in ("started", "finished"):
            counts[step_type][event] += 1
            pids[step_type].add(pid)
    for s in STEPS:
        counts[s]["workers"] = len(pids[s])
    return counts


async def demo(workdir: Path, keep: bool) -> int:
    procs = Processes(workdir)
    gates = workdir / "gates"
    gates.mkdir()
    journal = workdir / "journal.txt"
    address_file = workdir / "address"
    worker_env = {"HELLO_GATE_DIR": str(gates), "HELLO_JOURNAL": str(journal)}
    worker_cmd = [sys.executable, str(HERE / "worker.py")]
    try:
        step("Starting a dev server: [bold]dexcli dev[/] on a temporary data folder")
        server = procs.start(
            "server",
            [
                *dexcli(),
                "dev",
                "--data-dir",
                str(workdir / "data"),
                "--port",
                "0",
                "--address-file",
                str(address_file),
            ],
            {},
        )

        async def listening() -> bool:
            if server.poll() is not None:
                raise RuntimeError("dexcli dev exited:\n" + procs.log("server"))
            return address_file.exists() and bool(address_file.read_text().strip())

        await poll("waiting for the server to listen", listening)
        address = address_file.read_text().strip()
        done(f"server listening on {address} (SQLite in {workdir / 'data'})")
        worker_env["DEX_SERVER_ADDRESS"] = address

        step("Starting Worker #1")
        first = procs.start("worker-1", worker_cmd, worker_env)
        done(f"Worker #1 is process {first.pid}")

        options = dex.ClientOptions(server_address=address)
        async with dex.AsyncClient(registry(), options=options) as client:
            flow = ORDER_FLOW
            flow_id = f"order-{uuid.uuid4().hex[:8]}"
            order = Order(order_id=flow_id, item="teapot", quantity=2, amount_cents=4200)
            step(f"Starting OrderFlow [bold]{flow_id}[/]")
            run_id = await client.start_flow(flow, flow_id, order)
            done(f"started, run {run_id}")

            await poll(
                "waiting for Worker #1 to be inside ChargePayment",
                lambda: _exists(gates / "charge.reached"),
            )
            done("ReserveStock completed; ChargePayment is running in Worker #1")
            step(f"[bold red]SIGKILL[/] Worker #1 (process {first.pid}) in the middle of the Step")
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
            done("Worker #1 is gone; the Flow waits, holding nothing but rows in the store")

            step("Starting Worker #2")
            second = procs.start("worker-2", worker_cmd, worker_env)
            done(f"Worker #2 is process {second.pid}")

            async def awaiting_shipment() -> bool:
                state = await client.get_flow_state(flow_id)
                return any(
                    s.step_type == "AwaitShipment" and s.phase == "waiting"
                    for s in state.active_steps
                )

            await poll(
                f"ChargePayment runs again, then CoolingOff waits its "
                f"{COOLING_OFF.total_seconds():g} s Timer",
                awaiting_shipment,
            )
            done("ChargePayment completed on Worker #2, the Timer fired, CoolingOff completed")
            done("AwaitShipment is waiting for a message on the 'shipments' Channel")

            step("The warehouse calls the [bold]confirm_shipment[/] RPC with a tracking number")
            await client.invoke_rpc(flow.confirm_shipment, flow_id, "TRACK-1234")
            result = await client.wait_for_flow(flow_id, timeout=20.0)
            output = result.single_output(str)
            status = await client.invoke_rpc(flow.status, flow_id)
            done(f"Flow {result.status.value}: {output!r} (status Attribute: {status!r})")

        ok = report(journal_counts(journal))
        console.print()
        history_cmd = ["dexcli", "--server", address, "flow", "history", flow_id]
        console.print("[bold]The Flow's history, as dexcli shows it:[/]")
        subprocess.run([*dexcli(), *history_cmd[1:]], check=False)
        if keep:
            console.print("Look next (add --output json for JSON):")
        else:
            console.print("Look next: run the demo with --keep to keep its server up, then")
        console.print(f"  [bold]{' '.join(history_cmd)}[/]")
        if keep:
            console.print("\nThe server stays up (--keep). Press Ctrl-C to stop it.")
            try:
                server.wait()
            except KeyboardInterrupt:
                pass
        return 0 if ok else 1
    finally:
        procs.stop_all()


async def _exists(path: Path) -> bool:
    return path.exists()


def report(counts: dict[str, dict[str, int]]) -> bool:
    table = Table(title="Runs per Step (from the Steps' own journal)")
    for column in ("Step", "started", "finished", "Workers"):
        table.add_column(column)
    for s in STEPS:
        c = counts[s]
        table.add_row(s, str(c["started"]), str(c["finished"]), str(c["workers"]))
    console.print()
    console.print(table)
    exactly_once = all(counts[s]["finished"] == 1 for s in STEPS)
    no_repeat = all(counts[s]["started"] == 1 for s in STEPS if s != "ChargePayment")
    if exactly_once and no_repeat and counts["ChargePayment"]["started"] == 2:
        console.print(
            "[bold green]OK[/]: every Step completed exactly once. ReserveStock, completed "
            "before the crash, did not run again; only the interrupted ChargePayment ran "
            "a second time, on Worker #2."
        )
        return True
    console.print("[bold red]UNEXPECTED[/]: the counts above are not what Dex guarantees.")
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description="Dex hello_flow demo")
    parser.add_argument("--keep", action="store_true", help="keep the server up at the end")
    args = parser.parse_args()
    console.rule("[bold]Dex hello_flow[/]: a durable Flow survives a killed Worker")
    with tempfile.TemporaryDirectory(prefix="dex-hello-") as tmp:
        try:
            return asyncio.run(demo(Path(tmp), args.keep))
        except (TimeoutError, RuntimeError, dex.DexError) as exc:
            console.print(f"[bold red]demo failed:[/] {exc}")
            for name in ("server", "worker-1", "worker-2"):
                log = Path(tmp) / f"{name}.log"
                if log.exists() and log.stat().st_size:
                    console.rule(f"{name} log")
                    console.print(log.read_text(errors="replace")[-4000:], markup=False)
            return 1


if __name__ == "__main__":
    sys.exit(main())
