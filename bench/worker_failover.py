"""Time from a Worker's SIGKILL to the Step resuming on another Worker.

    uv run python bench/worker_failover.py [--samples 20] [--retry-s 0.1] [--no-fsync]

A Flow's only Step runs on Worker A and parks (a file gate marks the point). Worker B is
started and registered, then A is SIGKILLed. Two cases:

* ``silent``: the handler sent no frame before it parked, so the server hands the same
  attempt (attempt 1) to B. Figure: time from the kill to the first line of the handler
  on B. Target: <= 1 s.
* ``output``: the handler sent a heartbeat before it parked, so the attempt fails
  ("worker connection lost") and the retry policy starts attempt 2 on B after
  ``--retry-s`` (the Step's ``initial_interval``). Figure: time from the kill to the first
  line of attempt 2 on B; ``output_engine`` subtracts the retry delay.

Every sample starts one new Worker process (the next sample's B); the survivor of a sample
is the next sample's A. Kill and handler start are both read from ``time.monotonic()``
(``CLOCK_MONOTONIC``, shared by every process of the machine). Server: ``python -m
dex_server`` (``dex_server.testing.running_server``, SQLite, fsync on unless
``--no-fsync``). The last line is::

    worker_failover silent_p50_ms=... silent_p95_ms=... silent_max_ms=...
        output_p50_ms=... output_p95_ms=... output_max_ms=... retry_s=... samples=... fsync=on
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import dex
from dex_server.testing import running_server

GATE_DIR_ENV = "DEX_FAILOVER_DIR"
RETRY_ENV = "DEX_FAILOVER_RETRY_S"


def _gate_dir() -> Path:
    return Path(os.environ[GATE_DIR_ENV])


def _retry_s() -> float:
    return float(os.environ.get(RETRY_ENV, "0.1"))


async def _probe(ctx: dex.Context, tag: str, *, output: bool) -> dex.StepDecision:
    """Log ``pid attempt monotonic`` first; park unless the bench already killed a Worker."""
    now = time.monotonic()
    directory = _gate_dir()
    with open(directory / f"{tag}.log", "a") as log:
        log.write(f"{os.getpid()} {ctx.attempt} {now}\n")
    if (directory / f"{tag}.killed").exists():
        return dex.StepDecision.graceful_complete()
    if output:
        assert isinstance(ctx, dex.AsyncContext)
        await ctx.heartbeat("alive")
        await asyncio.sleep(0.05)  # let the heartbeat frame leave before the gate
    (directory / f"{tag}.reached").touch()
    await asyncio.sleep(3600)  # the bench SIGKILLs this process here
    return dex.StepDecision.graceful_complete()


def _options() -> dex.StepOptions:
    retry = dex.RetryPolicy(initial_interval=timedelta(seconds=_retry_s()), maximum_attempts=5)
    return dex.StepOptions(execute_retry=retry)


class Silent(dex.Step[str]):
    async def execute(self, ctx: dex.Context, tag: str) -> dex.StepDecision:
        return await _probe(ctx, tag, output=False)

    def get_step_options(self) -> dex.StepOptions:
        return _options()


class Chatty(dex.Step[str]):
    async def execute(self, ctx: dex.Context, tag: str) -> dex.StepDecision:
        return await _probe(ctx, tag, output=True)

    def get_step_options(self) -> dex.StepOptions:
        return _options()


class SilentFailover(dex.Flow[str]):
    def get_steps(self) -> dex.StepList[str]:
        return dex.StepList.start_step(Silent())


class OutputFailover(dex.Flow[str]):
    def get_steps(self) -> dex.StepList[str]:
        return dex.StepList.start_step(Chatty())


SILENT = SilentFailover()  # Client calls take the instances the Registry holds
OUTPUT = OutputFailover()


def registry() -> dex.Registry:
    return dex.Registry([SILENT, OUTPUT], allow_async_handlers=True)


# --------------------------------------------------------------------------- Worker child


async def run_worker(address: str) -> None:
    worker = dex.AsyncWorker(
        registry(),
        options=dex.WorkerOptions(
            server_address=address, pull=dex.PullWorkerOptions(max_concurrent_tasks=4)
        ),
    )
    running = asyncio.create_task(worker.run())
    await worker.wait_pull_registered(timeout=30)
    (_gate_dir() / f"worker-{os.getpid()}.ready").touch()
    await running


# --------------------------------------------------------------------------- bench


def spawn_worker(address: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, "--worker", address])


async def wait_file(path: Path, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def one_sample(
    client: dex.AsyncClient,
    address: str,
    directory: Path,
    live: subprocess.Popen[bytes],
    output: bool,
) -> tuple[float, subprocess.Popen[bytes]]:
    """Run one kill on ``live`` (the only connected Worker); return (ms, the survivor)."""
    tag = f"fo-{uuid.uuid4().hex[:12]}"
    flow: dex.Flow[str] = OUTPUT if output else SILENT
    await client.start_flow(flow, tag, tag)
    await wait_file(directory / f"{tag}.reached", f"{tag} to park on Worker {live.pid}")
    standby = spawn_worker(address)
    await wait_file(directory / f"worker-{standby.pid}.ready", f"Worker {standby.pid}")
    (directory / f"{tag}.killed").touch()
    killed_at = time.monotonic()
    os.kill(live.pid, signal.SIGKILL)
    result = await client.wait_for_flow(tag, timeout=60)
    live.wait()
    if result.status is not dex.FlowStatus.COMPLETED:
        raise SystemExit(f"{tag} ended {result.status.value}: {result.error_message}")
    rows = [line.split() for line in (directory / f"{tag}.log").read_text().splitlines()]
    runs = [(int(pid), int(attempt), float(at)) for pid, attempt, at in rows]
    if len(runs) != 2 or runs[0][0] != live.pid or runs[1][0] != standby.pid:
        raise SystemExit(f"{tag}: unexpected runs {runs} (A={live.pid}, B={standby.pid})")
    expected_attempt = 2 if output else 1
    if runs[1][1] != expected_attempt:
        raise SystemExit(f"{tag}: B ran attempt {runs[1][1]}, expected {expected_attempt}")
    return (runs[1][2] - killed_at) * 1000.0, standby


def summary(name: str, values: list[float]) -> tuple[float, float, float]:
    p50, p95, worst = statistics.median(values), percentile(values, 0.95), max(values)
    print(f"{name}: {len(values)} kills, p50 {p50:.1f} ms, p95 {p95:.1f} ms, max {worst:.1f} ms")
    return p50, p95, worst


async def bench(args: argparse.Namespace, directory: Path) -> None:
    os.environ[GATE_DIR_ENV] = str(directory)
    os.environ[RETRY_ENV] = str(args.retry_s)
    async with running_server(directory / "server", fsync=not args.no_fsync) as server:
        live = spawn_worker(server.address)
        try:
            await wait_file(directory / f"worker-{live.pid}.ready", f"Worker {live.pid}")
            options = dex.ClientOptions(server_address=server.address, timeout=120.0)
            figures: dict[str, list[float]] = {"silent": [], "output": []}
            async with dex.AsyncClient(registry(), options=options) as client:
                for i in range(2 * args.samples):
                    output = i % 2 == 1
                    ms, live = await one_sample(client, server.address, directory, live, output)
                    figures["output" if output else "silent"].append(ms)
                    print(f"  sample {i // 2 + 1} {'output' if output else 'silent'}: {ms:.1f} ms")
        finally:
            if live.poll() is None:
                live.send_signal(signal.SIGTERM)
                live.wait(timeout=30)
    s50, s95, smax = summary("silent (same attempt redelivered)", figures["silent"])
    o50, o95, omax = summary(f"output (attempt 2 after {args.retry_s}s retry)", figures["output"])
    delay_ms = args.retry_s * 1000.0
    print(f"output minus the retry delay: p50 {o50 - delay_ms:.1f} ms, p95 {o95 - delay_ms:.1f} ms")
    fsync = "off" if args.no_fsync else "on"
    print(
        f"worker_failover silent_p50_ms={s50:.1f} silent_p95_ms={s95:.1f} silent_max_ms={smax:.1f} "
        f"output_p50_ms={o50:.1f} output_p95_ms={o95:.1f} output_max_ms={omax:.1f} "
        f"output_engine_p50_ms={o50 - delay_ms:.1f} retry_s={args.retry_s} "
        f"samples={args.samples} fsync={fsync}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Dex Worker failover benchmark")
    parser.add_argument("--samples", type=int, default=20, help="kills per case")
    parser.add_argument("--retry-s", type=float, default=0.1, help="retry initial_interval")
    parser.add_argument("--no-fsync", action="store_true", help="synchronous=NORMAL")
    parser.add_argument("--worker", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(run_worker(args.worker))
        return
    with tempfile.TemporaryDirectory(prefix="dex-failover-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
