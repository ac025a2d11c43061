"""Internal entry point: ``python -m dex_server (--database-path P | --database-url U) [...]``.

Used by tests (through :mod:`dex_server.testing`) and by process supervisors; users run
``dexcli dev`` or ``dexcli server`` instead.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from dex_server.app import ServerConfig, UnixSocketError, run_server


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dex_server", description="Run a Dex server.")
    p.add_argument("--database-path", type=Path, default=None, help="SQLite file")
    p.add_argument(
        "--database-url",
        default=None,
        help="postgresql://user@host:port/db (default: env DEX_DATABASE_URL)",
    )
    p.add_argument("--pool-size", type=int, default=4, help="PostgreSQL connections (>= 2)")
    p.add_argument(
        "--verify-schema-only",
        action="store_true",
        help="do not migrate; fail if the schema is behind",
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8801)
    p.add_argument("--address-file", type=Path, default=None)
    p.add_argument(
        "--unix-socket",
        type=Path,
        default=None,
        metavar="PATH",
        help="also listen on this Unix socket (Workers on this machine: unix:///PATH)",
    )
    auth = p.add_mutually_exclusive_group()
    auth.add_argument("--token", default=None)
    auth.add_argument("--token-file", type=Path, default=None)
    p.add_argument("--retention-s", type=float, default=86400.0)
    p.add_argument("--retention-sweep-interval-s", type=float, default=60.0)
    p.add_argument("--no-fsync", action="store_true")
    p.add_argument("--blob-threshold-bytes", type=int, default=2048)
    p.add_argument("--max-request-bytes", type=int, default=16 * 1024 * 1024)
    p.add_argument("--max-value-bytes", type=int, default=4 * 1024 * 1024)
    p.add_argument("--max-flow-state-bytes", type=int, default=64 * 1024 * 1024)
    p.add_argument(
        "--dispatch-wait-s",
        type=float,
        default=None,
        help="default schedule-to-start timeout of Step attempts, in seconds (default, or"
        " 0: none, a ready attempt waits for a Worker as long as it takes)",
    )
    p.add_argument(
        "--worker-reconnect-grace-s",
        type=float,
        default=5.0,
        help="how long a disconnected Worker's tasks wait for it to reconnect and resume"
        " them before they are redelivered or failed, in seconds (0: no resuming)",
    )
    p.add_argument(
        "--server-lease-s",
        type=float,
        default=15.0,
        help="missed heartbeats before another server takes over (several servers)",
    )
    p.add_argument("--log-level", default="warning")
    p.add_argument("--max-header-bytes", type=int, default=64 * 1024, help="431 above it")
    p.add_argument("--max-header-count", type=int, default=100, help="431 above it")
    p.add_argument("--http-head-timeout-s", type=float, default=10.0)
    p.add_argument("--http-body-timeout-s", type=float, default=60.0)
    p.add_argument("--http-keep-alive-s", type=float, default=5.0)
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="most open connections (default: the open-file limit less 64)",
    )
    p.add_argument("--no-web", action="store_true", help="do not serve Dex Web at /ui")
    p.add_argument(
        "--max-sse-connections", type=int, default=1000, help="most open SSE connections"
    )
    p.add_argument(
        "--sse-heartbeat-s", type=float, default=15.0, help="seconds between SSE heartbeats"
    )
    return p


def config_from_args(argv: list[str] | None = None) -> ServerConfig:
    """Parse command-line arguments into a :class:`ServerConfig`."""
    p = _parser()
    a = p.parse_args(argv)
    url: str | None = a.database_url
    if a.database_path is None and url is None:
        url = os.environ.get("DEX_DATABASE_URL") or None
    if (a.database_path is None) == (url is None):
        p.error("give exactly one of --database-path and --database-url")
    token: str | None = a.token
    if a.token_file is not None:
        token = a.token_file.read_text().strip()
    return ServerConfig(
        database_path=a.database_path,
        database_url=url,
        pool_size=a.pool_size,
        verify_schema_only=a.verify_schema_only,
        host=a.host,
        port=a.port,
        address_file=a.address_file,
        unix_socket=a.unix_socket,
        token=token,
        retention_s=a.retention_s,
        retention_sweep_interval_s=a.retention_sweep_interval_s,
        fsync=not a.no_fsync,
        blob_threshold_bytes=a.blob_threshold_bytes,
        max_request_bytes=a.max_request_bytes,
        max_value_bytes=a.max_value_bytes,
        max_flow_state_bytes=a.max_flow_state_bytes,
        dispatch_wait_s=a.dispatch_wait_s or None,
        worker_reconnect_grace_s=a.worker_reconnect_grace_s,
        log_level=a.log_level,
        server_lease_s=a.server_lease_s,
        max_header_bytes=a.max_header_bytes,
        max_header_count=a.max_header_count,
        http_head_timeout_s=a.http_head_timeout_s,
        http_body_timeout_s=a.http_body_timeout_s,
        http_keep_alive_s=a.http_keep_alive_s,
        max_connections=a.max_connections,
        web=not a.no_web,
        max_sse_connections=a.max_sse_connections,
        sse_heartbeat_s=a.sse_heartbeat_s,
    )


def _shift_clock() -> None:
    """Tests only: ``DEX_TEST_CLOCK_OFFSET_S`` moves this process's wall clock.

    A server on a machine whose clock is off: ``time.time`` (every timestamp the server
    writes or compares) reads that many seconds ahead (negative: behind).
    """
    offset = float(os.environ.get("DEX_TEST_CLOCK_OFFSET_S") or 0.0)
    if offset:
        real = time.time
        time.time = lambda: real() + offset


def main(argv: list[str] | None = None) -> None:
    """Run a server configured from ``argv`` until SIGINT/SIGTERM."""
    from dex_server.store import DataFolderInUseError, SchemaBehindError, StoreUnavailableError

    _shift_clock()
    try:
        run_server(config_from_args(argv))
    except (DataFolderInUseError, StoreUnavailableError, SchemaBehindError, UnixSocketError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
