"""What one Client request costs: round trip, and CPU in the client and in the server.

    uv run python bench/client_requests.py [--requests 3000] [--concurrency 1]

Starts a server (``python -m dex_server``, SQLite in a temporary folder) and sends
``--requests`` ``AsyncClient.describe_flow`` calls for a Flow that does not exist (the
server looks it up in the store and answers 404, which the Client raises as
``FlowNotFoundError``) and as many ``get_health`` calls, each kind after a warm-up, with
``--concurrency`` requests in flight. It reports the mean round trip of each kind, and the
CPU the client process and the server process used per request
(``/proc/<pid>/task/*/schedstat``, all threads). The Client runs on asyncio's own loop,
like most applications that embed it.

The last line is::

    client_requests health_rtt_us=... health_client_cpu_us=... health_server_cpu_us=...
      describe_rtt_us=... describe_client_cpu_us=... describe_server_cpu_us=... concurrency=...
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import dex
from step_overhead import database_args, process_counters, start_server, stop


async def measure(
    call: Callable[[], Awaitable[object]], requests: int, concurrency: int, server: int
) -> tuple[float, float, float]:
    """Mean round trip, client CPU and server CPU per request, in microseconds."""
    for _ in range(200):
        await call()
    queue = iter(range(requests))

    async def lane() -> None:
        for _ in queue:
            await call()

    client0, server0 = process_counters(os.getpid())[0], process_counters(server)[0]
    wall0 = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(concurrency)))
    wall = time.perf_counter() - wall0
    client = process_counters(os.getpid())[0] - client0
    served = process_counters(server)[0] - server0
    per = 1e6 / requests
    return wall * per * concurrency, client * per, served * per


async def run(args: argparse.Namespace, address: str, server: int) -> str:
    client = dex.AsyncClient(dex.Registry([]), options=dex.ClientOptions(server_address=address))

    async def describe() -> None:
        try:
            await client.describe_flow("no-such-flow")
        except dex.errors.FlowNotFoundError:
            return
        raise SystemExit("describe_flow found a Flow that was never started")

    try:
        health = await measure(client.get_health, args.requests, args.concurrency, server)
        found = await measure(describe, args.requests, args.concurrency, server)
    finally:
        await client.close()
    print(
        f"get_health: {health[0]:.0f} us round trip, CPU {health[1]:.0f} us client, "
        f"{health[2]:.0f} us server"
    )
    print(
        f"describe_flow: {found[0]:.0f} us round trip, CPU {found[1]:.0f} us client, "
        f"{found[2]:.0f} us server"
    )
    return (
        f"client_requests health_rtt_us={health[0]:.0f} health_client_cpu_us={health[1]:.0f}"
        f" health_server_cpu_us={health[2]:.0f} describe_rtt_us={found[0]:.0f}"
        f" describe_client_cpu_us={found[1]:.0f} describe_server_cpu_us={found[2]:.0f}"
        f" concurrency={args.concurrency}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Cost of one Client request.")
    parser.add_argument("--requests", type=int, default=3000, help="requests per kind")
    parser.add_argument("--concurrency", type=int, default=1, help="requests in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dex-bench-client-") as tmp:
        workdir = Path(tmp)
        proc, address = start_server(database_args(None, workdir), workdir, fsync=True)
        try:
            line = asyncio.run(run(args, address, proc.pid))
        finally:
            stop(proc)
    print(line)


if __name__ == "__main__":
    main()
