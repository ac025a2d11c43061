"""Per-Step overhead and throughput of the engine, server and Worker in separate processes.

    uv run python bench/step_overhead.py [--steps 500] [--flows 100] [--flow-steps 20]
                                         [--no-fsync] [--database-url URL] [--servers N]
                                         [--in-process] [--unix]

``URL`` is ``sqlite:///PATH`` (default: a temporary file) or ``postgresql://...`` (used as
is: create an empty database for it, e.g. ``createdb -h 127.0.0.1 -U postgres dex_bench``).

1. One Flow runs a sequential chain of ``--steps`` no-op Steps. The overhead of one Step is
   the time between the commits of consecutive ``StepExecuteCompleted`` history events: the
   server commits a Step, pushes the next task to the Worker, the Worker runs the no-op
   handler and sends the result, the server commits it. Reported as p50 / p95.
2. ``--flows`` Flows of ``--flow-steps`` no-op Steps each run at the same time; reported as
   aggregate Steps per second (wall clock from the first start to the last completion).
   All of them are started before their Workers connect, so that all are live at once
   and the bench's own HTTP client (the starts and waits) stays out of the figure; the
   wall clock runs from letting the Workers go to the last close the server recorded.

``--servers N`` (PostgreSQL only) runs N servers on the one database, two Workers on
each (one for the sequential chain, one held back for the concurrent Flows), and starts
the concurrent Flows through the servers in turn (the sequential chain runs on the first).
Each held-back Worker has task slots for its server's share of the Flows, so the pool
they wait in splits between the servers; the ``concurrent:`` line gives each server's CPU
time over them, which shows how evenly it split.

``--unix`` gives each server a Unix socket (``--unix-socket``) and has its Workers connect
there (``server_address="unix:///PATH"``) instead of over loopback TCP; the bench's own
client stays on TCP. The last line says ``link=unix`` (else ``link=tcp``, or ``inproc``).

``--in-process`` runs the server and its Workers in one process instead: an application
with ``dex_server.embedded.EmbeddedServer`` whose ``AsyncWorker`` s connect through the
in-memory link (``inproc://``), no WebSocket between them; the bench's client still talks
HTTP to it from this process. The CPU time and context switches are then those of that
one process: ``server_cpu_ms`` and ``server_cs`` are the whole process (server and
Worker), ``worker_cpu_ms`` and ``worker_cs`` are 0, and the last line says
``mode=inproc`` (else ``mode=separate``).

The server is ``python -m dex_server`` on SQLite (``synchronous=FULL`` unless
``--no-fsync``) or PostgreSQL (``synchronous_commit`` on unless ``--no-fsync``); the
Worker is an ``AsyncWorker`` child process. During the sequential chain the bench also
reads, for every thread of the (first) server and its Worker, the CPU time
(``/proc/<pid>/task/*/schedstat``) and the context switches (voluntary and involuntary,
``/proc/<pid>/task/*/status``), and reports them per Step. The last line is::

    step_overhead p50_ms=... p95_ms=... steps_per_s=... server_cpu_ms=... worker_cpu_ms=...
        server_cs=... worker_cs=... fsync=on store=sqlite|postgres servers=1
        mode=separate|inproc link=tcp|unix|inproc
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
import threading
import time
import uuid
from pathlib import Path

import dex


class Noop(dex.Step[int]):
    async def execute(self, ctx: dex.Context, remaining: int) -> dex.StepDecision:
        if remaining <= 1:
            return dex.StepDecision.graceful_complete()
        return dex.StepDecision.go_to(Noop, remaining - 1)


class Chain(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Noop())


class Fanout(dex.Flow[int]):
    """The same chain as its own Flow type, served only by the concurrent phase's Workers."""

    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Noop())


CHAIN = Chain()  # Client calls take the instance the Registry holds
FANOUT = Fanout()

# concurrent start requests per server in the concurrent phase (see ``concurrent``)
_STARTS_IN_FLIGHT = 16  # below httpx's 20 kept-alive connections: no reconnects


def registry(*flows: dex.Flow[int]) -> dex.Registry:
    return dex.Registry(list(flows or (CHAIN, FANOUT)), allow_async_handlers=True)


# --------------------------------------------------------------------------- processes


async def run_worker(address: str, slots: int, gated: bool) -> None:
    if gated:  # the concurrent phase's Worker: connect once the bench writes a line
        await asyncio.to_thread(sys.stdin.readline)
    worker = dex.AsyncWorker(
        registry(FANOUT if gated else CHAIN),
        options=dex.WorkerOptions(
            server_address=address,
            pull=dex.PullWorkerOptions(max_concurrent_tasks=slots),
        ),
    )
    await worker.run()  # SIGINT / SIGTERM: graceful stop


async def run_embedded(args: argparse.Namespace) -> None:
    """The ``--in-process`` application: embedded server, chain Worker, gated Fanout Worker."""
    from dex_server.app import ServerConfig
    from dex_server.embedded import EmbeddedServer

    url = args.database_url
    config = ServerConfig(
        database_path=Path(args.database_path) if url is None else None,
        database_url=url,
        port=0,
        address_file=Path(args.address_file),
        fsync=not args.no_fsync,
    )
    stop_event = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_event.set)
    async with EmbeddedServer(config=config, name="bench") as server:

        def worker(flow: dex.Flow[int]) -> dex.AsyncWorker:
            options = dex.WorkerOptions(
                server_address=server.worker_address,
                pull=dex.PullWorkerOptions(max_concurrent_tasks=args.slots),
            )
            return dex.AsyncWorker(registry(flow), options=options)

        workers = [worker(CHAIN)]
        serving = [asyncio.create_task(workers[0].start())]

        def release_gated() -> None:  # the concurrent phase's Worker, on a line
            workers.append(worker(FANOUT))
            serving.append(asyncio.create_task(workers[-1].start()))

        def read_gate() -> None:  # a daemon thread: exiting never waits for the read
            if sys.stdin.readline():
                loop.call_soon_threadsafe(release_gated)

        threading.Thread(target=read_gate, daemon=True).start()
        await stop_event.wait()
        for w in workers:
            await w.close()
        await asyncio.gather(*serving, return_exceptions=True)


def start_embedded(
    db: list[str], workdir: Path, fsync: bool, slots: str
) -> tuple[subprocess.Popen[bytes], str]:
    """The ``--in-process`` application as a child process, and its HTTP address."""
    address_file = workdir / "embedded.address"
    option = "--database-path" if db[0] == "--database-path" else "--database-url"
    cmd = [sys.executable, __file__, "--embedded", option, db[1]]
    cmd += ["--address-file", str(address_file), "--slots", slots]
    if not fsync:
        cmd.append("--no-fsync")
    log = open(workdir / "embedded.log", "wb")
    proc = subprocess.Popen(
        cmd, stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    log.close()
    deadline = time.monotonic() + 30
    while not address_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(
                "embedded server did not start:\n" + (workdir / "embedded.log").read_text()
            )
        time.sleep(0.02)
    return proc, address_file.read_text().strip()


def database_args(url: str | None, workdir: Path) -> list[str]:
    if url is None:
        return ["--database-path", str(workdir / "bench.sqlite3")]
    if url.startswith(("postgresql://", "postgres://")):
        return ["--database-url", url]
    if not url.startswith("sqlite:///"):
        raise SystemExit(f"--database-url: expected sqlite:///PATH or postgresql://, got {url!r}")
    return ["--database-path", str(Path(url.removeprefix("sqlite:///")).resolve())]


def start_server(
    db: list[str], workdir: Path, fsync: bool, name: str = "server", unix: Path | None = None
) -> tuple[subprocess.Popen[bytes], str]:
    address_file = workdir / f"{name}.address"
    cmd = [
        sys.executable,
        "-m",
        "dex_server",
        *db,
        "--port",
        "0",
        "--address-file",
        str(address_file),
    ]
    if not fsync:
        cmd.append("--no-fsync")
    if unix is not None:
        cmd += ["--unix-socket", str(unix)]
    log = open(workdir / f"{name}.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    deadline = time.monotonic() + 30
    while not address_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("server did not start:\n" + (workdir / f"{name}.log").read_text())
        time.sleep(0.02)
    return proc, address_file.read_text().strip()


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# --------------------------------------------------------------------------- measurements


def process_counters(pid: int) -> tuple[float, int]:
    """CPU seconds and context switches of all threads of ``pid`` so far."""
    cpu_ns = 0
    switches = 0
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0, 0
    for tid in threads:
        try:
            cpu_ns += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    switches += int(line.split()[1])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended meanwhile
    return cpu_ns / 1e9, switches


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


async def run_chain(client: dex.AsyncClient, steps: int) -> str:
    flow_id = f"chain-{uuid.uuid4().hex[:10]}"
    await client.start_flow(CHAIN, flow_id, steps)
    result = await client.wait_for_flow(flow_id, timeout=600)
    if result.status is not dex.FlowStatus.COMPLETED:
        raise SystemExit(f"{flow_id} ended {result.status.value}: {result.error_message}")
    return flow_id


async def step_commit_times(client: dex.AsyncClient, flow_id: str) -> list[float]:
    times: list[float] = []
    token: str | None = None
    while True:
        page = await client.get_history(flow_id, page_size=1000, page_token=token)
        times.extend(e.event_time for e in page.events if e.type == "StepExecuteCompleted")
        token = page.next_page_token
        if not token:
            return times


async def sequential(client: dex.AsyncClient, steps: int) -> tuple[list[float], float]:
    """Per-Step overheads from the server's commit times, and the client's wall ms/Step."""
    started = time.perf_counter()
    flow_id = await run_chain(client, steps)
    wall_ms = (time.perf_counter() - started) * 1000.0 / steps
    times = await step_commit_times(client, flow_id)
    if len(times) != steps:
        raise SystemExit(f"expected {steps} StepExecuteCompleted events, got {len(times)}")
    return [(b - a) * 1000.0 for a, b in zip(times, times[1:], strict=False)], wall_ms


async def concurrent(
    clients: list[dex.AsyncClient], gates: list[subprocess.Popen[bytes]], flows: int, steps: int
) -> float:
    """Aggregate Steps/s of ``flows`` Flows that are all live at once.

    The bench process must not become what is measured: it is one Python HTTP client, and
    starting 1,000 Flows through it takes longer than running them (with starts and waits
    interleaved, only some 30-140 Flows were ever live at a time). So the ``Fanout`` Flows
    are all started first, while their Workers (one per server, ``gates``) are still held
    back before connecting; then the Workers are let go, and the figure runs from that
    moment to the last Flow's close time as the server recorded it.
    """
    if flows == 0:  # bench/peers.py runs only the sequential chain
        return 0.0
    ids = [f"conc-{uuid.uuid4().hex[:10]}" for _ in range(flows)]
    limits = [asyncio.Semaphore(_STARTS_IN_FLIGHT) for _ in clients]

    async def start(i: int) -> None:
        async with limits[i % len(clients)]:
            await clients[i % len(clients)].start_flow(FANOUT, ids[i], steps)

    await asyncio.gather(*(start(i) for i in range(flows)))
    released = time.time()
    for gate in gates:
        assert gate.stdin is not None
        gate.stdin.write(b"go\n")
        gate.stdin.flush()
    closed: list[float] = []
    wanted = set(ids)
    for i, flow_id in enumerate(ids):  # most have closed by the time the first did
        result = await clients[i % len(clients)].wait_for_flow(flow_id, timeout=600)
        if result.status is not dex.FlowStatus.COMPLETED:
            raise SystemExit(f"{flow_id} ended {result.status.value}: {result.error_message}")
    token: str | None = None
    while True:
        page = await clients[0].list_flows("Fanout", page_size=1000, page_token=token)
        closed.extend(
            f.closed_at.timestamp()
            for f in page.flows
            if f.closed_at is not None and f.flow_id in wanted  # a reused database has more
        )
        token = page.next_page_token
        if not token:
            break
    if len(closed) != flows:
        raise SystemExit(f"expected {flows} closed Fanout Flows, got {len(closed)}")
    return flows * steps / (max(closed) - released)


async def bench(args: argparse.Namespace, workdir: Path) -> None:
    db = database_args(args.database_url, workdir)
    store = "postgres" if db[0] == "--database-url" else "sqlite"
    if args.servers > 1 and store != "postgres":
        raise SystemExit("--servers N needs --database-url postgresql://...")
    servers: list[subprocess.Popen[bytes]] = []
    workers: list[subprocess.Popen[bytes]] = []
    gates: list[subprocess.Popen[bytes]] = []
    addresses: list[str] = []
    slots = str(args.flows + 8)
    # Each gated Worker has room for its server's share of the Flows. The Flows start before
    # any Fanout Worker is connected, so their first Steps wait in the pool, and a server
    # claims from it as many as its Worker has free slots: with room for all of them, the
    # first Worker to connect would take every Flow to its server, and the figure would be
    # one server's (or whichever way that race went).
    gate_slots = str(args.flows // args.servers + 8)
    if args.in_process and args.servers > 1:
        raise SystemExit("--in-process runs one embedded server: drop --servers")
    if args.in_process and args.unix:
        raise SystemExit("--in-process links its Workers in memory: drop --unix")
    try:
        if args.in_process:  # one process: server, chain Worker and gated Fanout Worker
            proc, address = start_embedded(db, workdir, not args.no_fsync, slots)
            servers.append(proc)
            addresses.append(address)
            gates.append(proc)
        for i in range(0 if args.in_process else args.servers):
            unix = workdir / f"server{i}.sock" if args.unix else None
            proc, address = start_server(
                db, workdir, fsync=not args.no_fsync, name=f"server{i}", unix=unix
            )
            servers.append(proc)
            addresses.append(address)
            worker_address = address if unix is None else f"unix://{unix}"
            workers.append(
                subprocess.Popen(
                    [sys.executable, __file__, "--worker", worker_address, "--slots", slots],
                    start_new_session=True,
                )
            )
            gates.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        __file__,
                        "--worker",
                        worker_address,
                        "--slots",
                        gate_slots,
                        "--gated",
                    ],
                    stdin=subprocess.PIPE,
                    start_new_session=True,
                )
            )
        options = [dex.ClientOptions(server_address=a, timeout=120.0) for a in addresses]
        clients = [dex.AsyncClient(registry(), options=o) for o in options]
        try:
            for c in clients:
                await run_chain(c, 50)  # warm up every process and the store
            load_before = os.getloadavg()[0]
            watched = [servers[0].pid, workers[0].pid if workers else 0]
            before = [process_counters(pid) for pid in watched]
            overheads, wall_ms = await sequential(clients[0], args.steps)
            after = [process_counters(pid) for pid in watched]
            cpu_before = [process_counters(p.pid)[0] for p in servers]
            steps_per_s = await concurrent(clients, gates, args.flows, args.flow_steps)
            # how the concurrent Flows' work fell on the servers (CPU seconds each)
            spent = [
                process_counters(p.pid)[0] - b for p, b in zip(servers, cpu_before, strict=True)
            ]
        finally:
            for c in clients:
                await c.close()
    finally:
        for proc in dict.fromkeys([*gates, *workers, *servers]):
            stop(proc)
    # per Step of the sequential chain: CPU ms and context switches of the server, the Worker
    cpu_ms = [(a[0] - b[0]) * 1000.0 / args.steps for a, b in zip(after, before, strict=True)]
    switches = [(a[1] - b[1]) / args.steps for a, b in zip(after, before, strict=True)]
    p50 = statistics.median(overheads)
    p95 = percentile(overheads, 0.95)
    fsync = "off" if args.no_fsync else "on"
    print(
        f"sequential: {args.steps} Steps, overhead p50 {p50:.3f} ms, p95 {p95:.3f} ms, "
        f"max {max(overheads):.3f} ms (client wall clock incl. start and wait: "
        f"{wall_ms:.3f} ms/Step)"
    )
    print(
        f"concurrent: {args.flows} Flows x {args.flow_steps} Steps on {args.servers} "
        f"server(s), {steps_per_s:.0f} Steps/s; server CPU "
        + ", ".join(f"{s:.2f} s" for s in spent)
    )
    print(
        f"per Step (sequential): server {cpu_ms[0]:.3f} ms CPU, {switches[0]:.2f} context "
        f"switches; Worker {cpu_ms[1]:.3f} ms CPU, {switches[1]:.2f} context switches"
    )
    # the figures are only as good as the machine is quiet: other load skews them
    print(f"load average (1 min) at start / end: {load_before:.2f} / {os.getloadavg()[0]:.2f}")
    link = "inproc" if args.in_process else "unix" if args.unix else "tcp"
    print(
        f"step_overhead p50_ms={p50:.3f} p95_ms={p95:.3f} steps_per_s={steps_per_s:.0f} "
        f"server_cpu_ms={cpu_ms[0]:.3f} worker_cpu_ms={cpu_ms[1]:.3f} "
        f"server_cs={switches[0]:.2f} worker_cs={switches[1]:.2f} "
        f"fsync={fsync} store={store} servers={args.servers} "
        f"mode={'inproc' if args.in_process else 'separate'} link={link}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description="Dex per-Step overhead benchmark")
    parser.add_argument("--steps", type=int, default=500, help="length of the sequential chain")
    parser.add_argument("--flows", type=int, default=100, help="concurrent Flows")
    parser.add_argument("--flow-steps", type=int, default=20, help="Steps per concurrent Flow")
    parser.add_argument("--no-fsync", action="store_true", help="synchronous=NORMAL")
    parser.add_argument(
        "--database-url", default=None, help="sqlite:///PATH (default: temp) or postgresql://..."
    )
    parser.add_argument("--servers", type=int, default=1, help="servers on one PostgreSQL database")
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="server and Workers in one process (embedded server, in-process link)",
    )
    parser.add_argument(
        "--unix",
        action="store_true",
        help="Workers connect over the server's Unix socket instead of TCP",
    )
    parser.add_argument("--worker", metavar="ADDRESS", help=argparse.SUPPRESS)
    parser.add_argument("--embedded", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--database-path", help=argparse.SUPPRESS)
    parser.add_argument("--address-file", help=argparse.SUPPRESS)
    parser.add_argument("--slots", type=int, default=108, help=argparse.SUPPRESS)
    parser.add_argument("--gated", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(run_worker(args.worker, args.slots, args.gated))
        return
    if args.embedded:
        try:  # the loop the separate server runs on (uvicorn[standard] installs uvloop)
            import uvloop
        except ImportError:
            asyncio.run(run_embedded(args))
        else:
            uvloop.run(run_embedded(args))
        return
    with tempfile.TemporaryDirectory(prefix="dex-bench-") as tmp:
        asyncio.run(bench(args, Path(tmp)))


if __name__ == "__main__":
    main()
