"""Instructions per Step of the server and of its Worker, counted by valgrind.

    uv run python bench/step_ir.py [--steps 500] [--warmup 100]

The CPU time of a Step swings by ±30 % between runs on a shared 2-core machine, so a
change of a few percent in the server's cost of a Step cannot be seen in
``bench/step_overhead.py``'s ``server_cpu_ms``. This bench counts the instructions
(``valgrind --tool=callgrind``, which repeats to within a fraction of a percent) of the
same sequential chain of no-op Steps as ``bench/step_overhead.py``: ``python -m
dex_server`` on SQLite (fsync on) and an ``AsyncWorker`` child connected over the
WebSocket, each run under callgrind. Unlike ``bench/agent_turn_ir.py`` (one process, the
in-process link) it includes the Worker stream's WebSocket layers on both ends. Only user
space is counted: the kernel's share (the fsync, the socket calls) is not in it.

Both processes run twice, once for a ``--warmup``-Step chain and once for a chain of
``--warmup + --steps`` Steps (after the same start-up); the difference divided by
``--steps`` is the figure, so start-up and imports cancel out. Needs ``valgrind`` on the
PATH (Debian's package); each run takes a minute or two. The last line is::

    step_ir server_instructions_per_step=... worker_instructions_per_step=... steps=...

The count repeats from run to run within a sitting, not between sittings (the same build
counted 450 k and 524 k server instructions per Step in two sittings on machines of the
same kind): ``bench/compare.py --a A --b B -- bench/step_ir.py`` gives the ratio of two
builds in alternating runs of one sitting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import _callgrind
import dex
import step_overhead

HERE = Path(__file__).resolve().parent


def stop(proc: subprocess.Popen[bytes], what: str) -> None:
    proc.send_signal(signal.SIGINT)  # a graceful stop, so that callgrind writes its totals
    try:
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise SystemExit(f"the counted {what} did not stop") from None


def count(steps: int, workdir: Path) -> tuple[int, int]:
    """Instructions of the server and of the Worker over one chain of ``steps`` Steps."""
    run = workdir / f"chain-{steps}"
    run.mkdir()
    address_file = run / "server.address"
    server_out, worker_out = run / "server.callgrind", run / "worker.callgrind"
    server_cmd = _callgrind.command(server_out, "-m", "dex_server", "--database-path")
    server_cmd += [str(run / "bench.sqlite3"), "--port", "0", "--address-file", str(address_file)]
    log = open(run / "server.log", "wb")
    server = subprocess.Popen(
        server_cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=_callgrind.environment(dict(os.environ)),
    )
    log.close()
    try:
        deadline = time.monotonic() + 600
        while not address_file.exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the counted server did not start:\n" + read_log(run))
            time.sleep(0.2)
        address = address_file.read_text().strip()
        worker_cmd = _callgrind.command(
            worker_out, str(HERE / "step_overhead.py"), "--worker", address
        )
        worker = subprocess.Popen(
            worker_cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=_callgrind.environment(dict(os.environ)),
        )
        try:

            async def chain() -> None:
                options = dex.ClientOptions(server_address=address)
                client = dex.AsyncClient(step_overhead.registry(), options=options)
                try:
                    await step_overhead.run_chain(client, steps)
                finally:
                    await client.close()

            asyncio.run(chain())
        finally:
            stop(worker, "Worker")
    finally:
        stop(server, "server")
    return _callgrind.totals(server_out), _callgrind.totals(worker_out)


def read_log(run: Path) -> str:
    try:
        return (run / "server.log").read_text()[-3000:]
    except OSError:
        return ""


def main() -> None:
    parser = argparse.ArgumentParser(description="Instructions per Step (valgrind).")
    parser.add_argument("--steps", type=int, default=500, help="Steps counted (default 500)")
    parser.add_argument(
        "--warmup", type=int, default=100, help="Steps of the shorter chain (default 100)"
    )
    args = parser.parse_args()
    with _callgrind.workdir("dex-step-ir-") as workdir:
        print(f"counting a {args.warmup}-Step chain ...", flush=True)
        base = count(args.warmup, workdir)
        print(f"counting a {args.warmup + args.steps}-Step chain ...", flush=True)
        more = count(args.warmup + args.steps, workdir)
    server, worker = ((m - b) / args.steps for m, b in zip(more, base, strict=True))
    print(
        f"step_ir server_instructions_per_step={server:.0f}"
        f" worker_instructions_per_step={worker:.0f} steps={args.steps}"
    )


if __name__ == "__main__":
    main()
