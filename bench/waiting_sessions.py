"""Memory of many waiting Flows: rows in the store, not server or Worker memory.

    uv run python bench/waiting_sessions.py [--flows 100000] [--concurrency 64]
                                            [--wake 200] [--no-fsync]

``--flows`` Flows each run one Step whose ``wait_for`` waits for one message on a Channel
(``Wait.until(WAKE.for_one())``), then park. The bench measures the resident memory
(``VmRSS`` of ``/proc/<pid>/status``) of the server and of the Worker process after a
warm-up of ``--warmup`` parked Flows (imports, caches, connection pools and the first
store pages are then in place) and again once all ``--flows`` are parked; the growth is
what the waiting Flows cost. Afterwards ``--wake`` of them (spread over the whole range)
get a message through a transactional RPC and must complete with the expected output.

Starts go through ``--starters`` client processes (one ``AsyncClient`` each) with at most
``--concurrency`` requests in flight in total, with a progress line every few seconds.
Whether a Flow is parked is read from the SQLite file (read-only, ``executions.phase =
'waiting'``). Server: ``python -m dex_server``
(``dex_server.testing.running_server``, SQLite, fsync on unless ``--no-fsync``); Worker:
an ``AsyncWorker`` child process. Targets: server growth <= 100 MB for 100,000 waiting
Flows, Worker growth ~0. The last line is::

    waiting_sessions flows=... server_rss_mb_before=... server_rss_mb_after=...
        server_growth_mb=... worker_rss_mb_before=... worker_rss_mb_after=...
        worker_growth_mb=... woken=... starts_per_s=... fsync=on
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import dex
from dex_server.testing import running_server

WAKE = dex.Channel("wake", int)


class Park(dex.Step[int]):
    async def wait_for(self, ctx: dex.Context, input: int) -> dex.Wait:
        return dex.Wait.until(WAKE.for_one())

    async def execute(self, ctx: dex.Context, input: int) -> dex.StepDecision:
        return dex.StepDecision.graceful_complete(WAKE.results(ctx)[0] + input)


class Waiting(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Park())

    def get_persistence_schema(self) -> dex.PersistenceSchema:
        return dex.PersistenceSchema.of(WAKE)

    @dex.rpc(is_transactional=True)
    async def wake(self, ctx: dex.Context, value: int) -> dex.RPCResult[None]:
        WAKE.publish(ctx, value)
        return dex.RPCResult()


WAITING = Waiting()


def registry() -> dex.Registry:
    return dex.Registry([WAITING], allow_async_handlers=True)


# --------------------------------------------------------------------------- Worker child


async def run_worker(address: str, slots: int) -> None:
    worker = dex.AsyncWorker(
        registry(),
        options=dex.WorkerOptions(
            server_address=address, pull=dex.PullWorkerOptions(max_concurrent_tasks=slots)
        ),
    )
    await worker.run()  # SIGTERM: graceful stop


# --------------------------------------------------------------------------- measuring


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    raise SystemExit(f"no VmRSS for pid {pid}")


def waiting_count(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        row = conn.execute("SELECT count(*) FROM executions WHERE phase = 'waiting'").fetchone()
        return int(row[0])
    finally:
        conn.close()


def flow_id(i: int) -> str:
    return f"wait-{i:07d}"


async def start_range(client: dex.AsyncClient, first: int, last: int, concurrency: int) -> None:
    """Start Flows ``first..last-1`` with at most ``concurrency`` requests in flight."""
    indexes = iter(range(first, last))

    async def starter() -> None:
        for i in indexes:
            for attempt in range(5):
                try:
                    await client.start_flow(WAITING, flow_id(i), i)
                    break
                except dex.errors.FlowAlreadyStartedError:
                    break  # an earlier try that lost its connection did start it
                except dex.errors.ServiceUnavailableError:
                    if attempt == 4:
                        raise
                    await asyncio.sleep(0.2)

    await asyncio.gather(*(starter() for _ in range(min(concurrency, last - first))))


async def run_starter(address: str, first: int, last: int, concurrency: int) -> None:
    options = dex.ClientOptions(server_address=address, timeout=120.0)
    async with dex.AsyncClient(registry(), options=options) as client:
        await start_range(client, first, last, concurrency)


async def start_in_children(
    address: str, db: Path, first: int, last: int, args: argparse.Namespace
) -> float:
    """Start Flows ``first..last-1`` from ``--starters`` child processes; return starts/s.

    One client process cannot keep the server busy (encoding and HTTP cost about as much
    CPU on the client side), so the range is split between several.
    """
    started = time.perf_counter()
    bounds = [first + (last - first) * k // args.starters for k in range(args.starters + 1)]
    per_child = max(1, args.concurrency // args.starters)
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--starter", address, str(a), str(b), str(per_child)
        )
        for a, b in zip(bounds, bounds[1:], strict=False)
        if b > a
    ]
    waits = asyncio.gather(*(c.wait() for c in children))
    while not waits.done():
        await asyncio.wait([waits], timeout=5.0)
        count = await asyncio.to_thread(waiting_count, db)
        rate = (count - first) / (time.perf_counter() - started)
        print(f"  parked {count:,} of {last:,} ({rate:,.0f}/s)", flush=True)
    if any(code != 0 for code in waits.result()):
        raise SystemExit(f"a starter process failed: exit codes {waits.result()}")
    return (last - first) / (time.perf_counter() - started)


async def wait_parked(db: Path, expected: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last_report = time.monotonic()
    while True:
        count = await asyncio.to_thread(waiting_count, db)
        if count >= expected:
            return
        now = time.monotonic()
        if now > deadline:
            raise SystemExit(f"only {count} of {expected} Flows parked within {timeout}s")
        if now - last_report >= 5.0:
            last_report = now
            print(f"  parked {count:,} of {expected:,}")
        await asyncio.sleep(0.2)


async def settle() -> None:
    """Give both processes a moment to return to idle (no measurement while busy)."""
    await asyncio.sleep(1.0)


async def wake_sample(client: dex.AsyncClient, flows: int, count: int) -> int:
    step = max(1, flows // max(count, 1))
    picks = list(range(0, flows, step))[:count]
    sem = asyncio.Semaphore(16)

    async def wake(i: int) -> None:
        async with sem:
            await client.invoke_rpc(WAITING.wake, flow_id(i), 1_000_000)
            result = await client.wait_for_flow(flow_id(i), timeout=60)
            output = result.single_output(int)
            if output != 1_000_000 + i:
                raise SystemExit(f"{flow_id(i)}: unexpected output {output!r}")

    await asyncio.gather(*(wake(i) for i in picks))
    return len(picks)


async def bench(args: argparse.Namespace, directory: Path) -> None:
    warmup = min(args.warmup, args.flows)
    async with running_server(directory / "server", fsync=not args.no_fsync) as server:
        worker = subprocess.Popen(
            [sys.executable, __file__, "--worker", server.address, "--slots", str(args.slots)]
        )
        try:
            options = dex.ClientOptions(server_address=server.address, timeout=120.0)
            async with dex.AsyncClient(registry(), options=options) as client:
                db = server.database_path
                await start_range(client, 0, warmup, args.concurrency)
                await wait_parked(db, warmup, 120)
                await settle()
                server_before, worker_before = rss_mb(server.pid), rss_mb(worker.pid)
                print(
                    f"after {warmup:,} parked Flows: server {server_before:.1f} MB, "
                    f"Worker {worker_before:.1f} MB"
                )
                rate = await start_in_children(server.address, db, warmup, args.flows, args)
                await wait_parked(db, args.flows, 600)
                await settle()
                server_after, worker_after = rss_mb(server.pid), rss_mb(worker.pid)
                print(
                    f"after {args.flows:,} parked Flows: server {server_after:.1f} MB, "
                    f"Worker {worker_after:.1f} MB ({rate:,.0f} starts/s)"
                )
                db_mb = sum(p.stat().st_size for p in db.parent.glob(db.name + "*")) / 2**20
                print(f"store files: {db_mb:.1f} MB")
                woken = await wake_sample(client, args.flows, args.wake)
                print(f"woke {woken} parked Flows; each completed with the expected output")
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
    fsync = "off" if args.no_fsync else "on"
    print(
        f"waiting_sessions flows={args.flows} server_rss_mb_before={server_before:.1f} "
        f"server_rss_mb_after={server_after:.1f} "
        f"server_growth_mb={server_after - server_before:.1f} "
        f"worker_rss_mb_before={worker_before:.1f} worker_rss_mb_after={worker_after:.1f} "
        f"worker_growth_mb={worker_after - worker_before:.1f} woken={woken} "
        f"starts_per_s={rate:.0f} fsync={fsync}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Dex waiting-Flows memory benchmark")
    parser.add_argument("--flows", type=int, default=100_000, help="parked Flows in total")
    parser.add_argument("--warmup", type=int, default=1_000, help="parked before 'before'")
    parser.add_argument("--concurrency", type=int, default=64, help="starts in flight")
    parser.add_argument("--starters", type=int, default=3, help="client processes")
    parser.add_argument("--wake", type=int, default=200, help="parked Flows to wake at the end")
    parser.add_argument("--no-fsync", action="store_true", help="synchronous=NORMAL")
    parser.add_argument("--worker", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--slots", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--starter", nargs=4, metavar="X", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.starter:
        address, first, last, concurrency = args.starter
        asyncio.run(run_starter(address, int(first), int(last), int(concurrency)))
        return
    if args.worker:
        asyncio.run(run_worker(args.worker, args.slots))
        return
    with tempfile.TemporaryDirectory(prefix="dex-waiting-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
