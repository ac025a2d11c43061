"""Restate: S ``ctx.run`` no-ops in one handler, the Restate server on its own disk log.

Run by ``bench/peers.py`` in the peers' environment with ``--restate-server BINARY`` (the
binary of the npm package ``@restatedev/restate-server``). This process starts a fresh
``restate-server`` (a child process with its own data directory, one partition, telemetry
off), serves the handler with Hypercorn (HTTP/2, the SDK's bidirectional mode) on a
thread, registers the deployment and calls the handler through the ingress.

Durability: Restate's defaults are kept. A ``ctx.run`` result goes to the server, which
appends it to its log (the replicated loglet with replication 1, RocksDB with the WAL
fsync on: ``rocksdb-disable-wal-fsync = false``) and acknowledges it; the handler goes on
only after the acknowledgement. The configuration in force is read back with
``--dump-config`` and reported.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import restate
from _common import parse_args, report
from hypercorn.asyncio import serve
from hypercorn.config import Config

MARKS: list[float] = []
chain = restate.Service("Chain")


def noop() -> None:
    return None


@chain.handler()
async def run(ctx: restate.Context, n: int) -> int:
    for _ in range(n):
        await ctx.run_typed("noop", noop)
        MARKS.append(time.perf_counter())
    return n


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http(method: str, url: str, body: Any = None, timeout: float = 120.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    with urllib.request.urlopen(request, timeout=timeout) as response:
        text = response.read()
    return json.loads(text) if text else None


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        if proc.poll() is not None:
            raise SystemExit("restate-server exited:\n" + log.read_text()[-3000:])
        try:
            http("GET", url, timeout=2)
            return
        except (urllib.error.URLError, ConnectionError, OSError):
            if time.monotonic() > deadline:
                raise SystemExit(
                    f"restate-server not ready at {url}:\n" + log.read_text()[-3000:]
                ) from None
            time.sleep(0.1)


def serve_handler(port: int) -> None:
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.h2_max_concurrent_streams = 1000
    config.keep_alive_timeout = 3600
    app = restate.app(services=[chain])

    async def forever() -> None:
        # a shutdown trigger keeps Hypercorn off signal handlers (this is not the main thread)
        await asyncio.Event().wait()

    asyncio.run(serve(app, config, shutdown_trigger=forever))


def main() -> None:
    args = parse_args("Restate chain")
    binary = os.environ.get("PEERS_RESTATE_SERVER")
    if not binary or not Path(binary).is_file():
        raise SystemExit("restate: PEERS_RESTATE_SERVER must name the restate-server binary")
    ingress, admin, node, sdk = free_port(), free_port(), free_port(), free_port()
    config_file = args.workdir / "restate.toml"
    config_file.write_text(
        "\n".join(
            [
                'cluster-name = "peers-bench"',
                "default-num-partitions = 1",
                "disable-telemetry = true",
                'log-filter = "error"',
                'rocksdb-total-memory-size = "256.0 MiB"',
                f'bind-address = "127.0.0.1:{node}"',
                "[ingress]",
                f'bind-address = "127.0.0.1:{ingress}"',
                "[admin]",
                f'bind-address = "127.0.0.1:{admin}"',
                "",
            ]
        )
    )
    dumped = subprocess.run(
        [binary, "--config-file", str(config_file), "--dump-config"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fsync_off = [ln for ln in dumped.splitlines() if ln.startswith("rocksdb-disable-wal")]
    if any(ln.endswith("true") for ln in fsync_off):
        raise SystemExit(f"restate: the WAL or its fsync is off: {fsync_off}")
    log = args.workdir / "restate.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                binary,
                "--config-file",
                str(config_file),
                "--base-dir",
                str(args.workdir / "restate-data"),
                "--no-logo",
                "--listen-mode",
                "tcp",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        threading.Thread(target=serve_handler, args=(sdk,), daemon=True).start()
        wait_ready(f"http://127.0.0.1:{admin}/health", proc, log)
        wait_ready(f"http://127.0.0.1:{ingress}/restate/health", proc, log)
        deadline = time.monotonic() + 60
        while True:  # the SDK's port may not be open yet
            try:
                http(
                    "POST",
                    f"http://127.0.0.1:{admin}/deployments",
                    {"uri": f"http://127.0.0.1:{sdk}"},
                )
                break
            except urllib.error.HTTPError as e:
                if time.monotonic() > deadline:
                    raise SystemExit(f"restate: registration failed: {e} {e.read()!r}") from e
                time.sleep(0.2)
        for n in (args.warmup, args.steps):
            MARKS.clear()
            started = time.perf_counter()
            # the ingress may need a moment to learn the new deployment
            while True:
                try:
                    result = http("POST", f"http://127.0.0.1:{ingress}/Chain/run", n, timeout=600)
                    break
                except urllib.error.HTTPError as e:
                    if e.code != 404 or time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
                    MARKS.clear()
                    started = time.perf_counter()
            wall = time.perf_counter() - started
            if result != n:
                raise SystemExit(f"restate: the handler returned {result!r}, not {n}")
        report("restate", list(MARKS), wall, args.steps, "restate-log-rocksdb-wal-fsync=on")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


if __name__ == "__main__":
    main()
