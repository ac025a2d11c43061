"""Cost per message of draining a Channel, one message per Step, at two backlog sizes.

    uv run python bench/channel_drain.py [--small 100] [--large 5000] [--no-fsync]
                                         [--database-url URL]

One Flow publishes ``N`` messages to one Channel in its first Step, then a Step that waits
for exactly one message runs once per message, in a loop, until the Channel is empty. The
cost per message is the time from the first to the last ``StepExecuteCompleted`` commit of
the draining Step, divided by the messages drained. Each match must find the next message
of a backlog of up to ``N``, so the figure at ``--large`` stays near the one at ``--small``
only if matching reads what it needs rather than the whole backlog. The Consume Step
checks each message arrives in publish order and fails the Flow otherwise.

Server and Worker run in their own processes as in ``bench/step_overhead.py``. The last
line is::

    channel_drain small=100 small_ms=... large=5000 large_ms=... ratio=... store=sqlite fsync=on
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import dex
from step_overhead import database_args, start_server, stop

JOBS = dex.Channel("jobs", int)
_PUBLISH_CHUNK = 500  # messages per RPC, well under the result limits


class Consume(dex.Step[int]):
    """Takes one message; it must be ``input`` (publish order), then loops until empty."""

    async def wait_for(self, ctx: dex.Context, expected: int) -> dex.Wait:
        return dex.Wait.until(JOBS.for_one())

    async def execute(self, ctx: dex.Context, expected: int) -> dex.StepDecision:
        got = JOBS.results(ctx)
        if got != [expected]:
            raise RuntimeError(f"expected message {expected}, got {got}")
        return dex.force_complete_if_channels_empty(
            expected + 1, dex.StepMovement.of(Consume, expected + 1), JOBS
        )


class Hold(dex.Step[int]):
    """Parks the Flow until the ``go`` message, so the whole backlog is in place first."""

    async def wait_for(self, ctx: dex.Context, expected: int) -> dex.Wait:
        return dex.Wait.until(GO.for_one())

    async def execute(self, ctx: dex.Context, expected: int) -> dex.StepDecision:
        return dex.StepDecision.go_to(Consume, 0)


GO = dex.Channel("go", int)


class Drain(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Hold()).other_steps(Consume())

    def get_persistence_schema(self) -> dex.PersistenceSchema:
        return dex.PersistenceSchema.of(JOBS, GO)

    @dex.rpc
    async def fill(self, ctx: dex.Context, values: list[int]) -> None:
        for v in values:
            JOBS.publish(ctx, v)

    @dex.rpc
    async def go(self, ctx: dex.Context) -> None:
        GO.publish(ctx, 1)


DRAIN = Drain()


def registry() -> dex.Registry:
    return dex.Registry([DRAIN], allow_async_handlers=True)


async def run_worker(address: str) -> None:
    worker = dex.AsyncWorker(registry(), options=dex.WorkerOptions(server_address=address))
    await worker.run()


async def drain_ms(client: dex.AsyncClient, n: int) -> float:
    """Fill a backlog of ``n`` messages, drain it, return the ms per drained message."""
    flow_id = f"drain-{uuid.uuid4().hex[:10]}"
    await client.start_flow(DRAIN, flow_id, 0)
    for i in range(0, n, _PUBLISH_CHUNK):
        await client.invoke_rpc(DRAIN.fill, flow_id, list(range(i, min(n, i + _PUBLISH_CHUNK))))
    await client.invoke_rpc(DRAIN.go, flow_id)
    result = await client.wait_for_flow(flow_id, timeout=1200)
    if result.status is not dex.FlowStatus.COMPLETED:
        raise SystemExit(f"{flow_id} ended {result.status.value}: {result.error_message}")
    times: list[float] = []
    token: str | None = None
    while True:
        page = await client.get_history(flow_id, page_size=1000, page_token=token)
        times.extend(e.event_time for e in page.events if e.type == "StepExecuteCompleted")
        token = page.next_page_token
        if not token:
            break
    consumed = times[1:]  # the first is Hold's
    if len(consumed) != n:
        raise SystemExit(f"expected {n} Consume commits, got {len(consumed)}")
    return (consumed[-1] - consumed[0]) * 1000.0 / (n - 1)


async def bench(args: argparse.Namespace, workdir: Path) -> None:
    db = database_args(args.database_url, workdir)
    store = "postgres" if db[0] == "--database-url" else "sqlite"
    server, address = start_server(db, workdir, fsync=not args.no_fsync)
    worker = subprocess.Popen(
        [sys.executable, __file__, "--worker", address], start_new_session=True
    )
    try:
        options = dex.ClientOptions(server_address=address, timeout=120.0)
        client = dex.AsyncClient(registry(), options=options)
        try:
            await drain_ms(client, 50)  # warm up every process and the store
            load_before = os.getloadavg()[0]
            small = await drain_ms(client, args.small)
            large = await drain_ms(client, args.large)
        finally:
            await client.close()
    finally:
        stop(worker)
        stop(server)
    print(f"load average (1 min) at start / end: {load_before:.2f} / {os.getloadavg()[0]:.2f}")
    fsync = "off" if args.no_fsync else "on"
    print(
        f"channel_drain small={args.small} small_ms={small:.3f} large={args.large}"
        f" large_ms={large:.3f} ratio={large / small:.3f} store={store} fsync={fsync}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Dex Channel drain benchmark")
    parser.add_argument("--small", type=int, default=100, help="the small backlog")
    parser.add_argument("--large", type=int, default=5000, help="the large backlog")
    parser.add_argument("--no-fsync", action="store_true", help="synchronous=NORMAL")
    parser.add_argument(
        "--database-url", default=None, help="sqlite:///PATH (default: temp) or postgresql://..."
    )
    parser.add_argument("--worker", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(run_worker(args.worker))
        return
    with tempfile.TemporaryDirectory(prefix="dex-bench-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
