"""``dexcli dev`` and ``dexcli server``: run the Dex server in this process."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shlex
import signal
import sys
import tempfile
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from dex_server.app import ServerConfig, UnixSocketError, serve
from dex_server.cli._durations import human_duration, is_loopback, parse_duration
from dex_server.cli._output import EXIT_REQUEST_FAILED, CliError, usage_error
from dex_server.store import (
    DataFolderInUseError,
    SchemaBehindError,
    StoreUnavailableError,
    is_postgres_url,
)

ENGINES = ("zd",)


@dataclass(frozen=True, kw_only=True)
class DevArgs:
    data_dir: Path
    host: str
    port: int
    address_file: Path | None
    retention: str
    engine: str
    token_file: Path | None
    database_url: str | None = None
    web: bool = True
    unix_socket: Path | None = None


@dataclass(frozen=True, kw_only=True)
class HttpArgs:
    """The connection limits of ``dexcli server`` (see :class:`ServerConfig`)."""

    max_header_bytes: int = 64 * 1024
    max_header_count: int = 100
    http_head_timeout_s: float = 10.0
    http_body_timeout_s: float = 60.0
    http_keep_alive_s: float = 5.0
    max_connections: int | None = None
    max_sse_connections: int = 1000


@dataclass(frozen=True, kw_only=True)
class ServerArgs:
    database_url: str
    host: str
    port: int
    token_file: Path | None
    retention: str
    address_file: Path | None
    pool_size: int = 4
    sqlite_cache_mib: int = 16
    verify_schema_only: bool = False
    server_lease_s: float = 15.0
    http: HttpArgs = HttpArgs()
    web: bool = True
    unix_socket: Path | None = None


def dev_config(args: DevArgs) -> ServerConfig:
    """Build the configuration of ``dexcli dev`` (SQLite in the data folder, loopback only)."""
    if args.engine not in ENGINES:
        raise usage_error(f"--engine: unknown engine {args.engine!r} (available: zd)")
    if not is_loopback(args.host):
        raise usage_error(
            f"--host: dexcli dev binds loopback addresses only, not {args.host!r}; "
            "use `dexcli server` to serve other machines"
        )
    data_dir = args.data_dir.expanduser().resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    url = args.database_url
    if url is not None and not is_postgres_url(url):
        raise usage_error(f"--database-url: expected postgresql://..., got {url!r}")
    return ServerConfig(
        host=args.host,
        port=args.port,
        database_path=None if url else data_dir / "dex.sqlite3",
        database_url=url,
        address_file=(args.address_file or data_dir / "address").resolve(),
        token=_read_token(args.token_file, env=None),
        retention_s=parse_duration(args.retention, option="--retention"),
        web=args.web,
        unix_socket=args.unix_socket.resolve() if args.unix_socket else None,
    )


def server_config(args: ServerArgs) -> ServerConfig:
    """Build the configuration of ``dexcli server`` from its database URL."""
    url = args.database_url
    return ServerConfig(
        host=args.host,
        port=args.port,
        database_path=None if is_postgres_url(url) else sqlite_path(url),
        database_url=url if is_postgres_url(url) else None,
        pool_size=args.pool_size,
        sqlite_cache_mib=args.sqlite_cache_mib,
        verify_schema_only=args.verify_schema_only,
        server_lease_s=args.server_lease_s,
        address_file=args.address_file.resolve() if args.address_file else None,
        token=_read_token(args.token_file, env="DEX_SERVER_TOKEN"),
        retention_s=parse_duration(args.retention, option="--retention"),
        **dataclasses.asdict(args.http),
        web=args.web,
        unix_socket=args.unix_socket.resolve() if args.unix_socket else None,
    )


def sqlite_path(url: str) -> Path:
    """Return the file of a ``sqlite:///relative`` or ``sqlite:////absolute`` URL.

    Raises:
        CliError: usage error for other schemes.

    """
    scheme, sep, rest = url.partition("://")
    if scheme != "sqlite" or not sep or not rest.startswith("/") or rest == "/":
        raise usage_error(
            "--database-url: expected sqlite:///relative/path, sqlite:////absolute/path "
            f"or postgresql://USER@HOST:PORT/DB, "
            f"got {url!r}"
        )
    path = Path(rest[1:]).expanduser().resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _read_token(token_file: Path | None, *, env: str | None) -> str | None:
    if token_file is not None:
        try:
            token = token_file.read_text().strip()
        except OSError as exc:
            raise usage_error(f"--token-file: cannot read {token_file}: {exc.strerror}") from exc
        if not token:
            raise usage_error(f"--token-file: {token_file} is empty")
        return token
    if env is not None:
        return os.environ.get(env) or None
    return None


def run(config: ServerConfig, *, banner: bool, token_file: Path | None = None) -> None:
    """Serve until SIGINT or SIGTERM, then stop gracefully; print where to connect.

    ``token_file`` (``--token-file``) is only named in the banner's hints, never read here.
    """

    # A signal that arrives before the server installs its own handlers (or that it
    # re-raises after its graceful stop) ends up here and means "stop", not a traceback.
    def stop(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, stop)
    with tempfile.TemporaryDirectory(prefix="dexcli-") as tmp:
        # Without an address file of the caller's, use a private one to learn the bound port.
        address_file = config.address_file or Path(tmp) / "address"
        config = dataclasses.replace(config, address_file=address_file)
        try:
            _event_loop_run(_serve(config, banner=banner, token_file=token_file))
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            # Nobody listens there any more: do not leave a stale address behind.
            address_file.unlink(missing_ok=True)
    _info("dex server stopped")


def _event_loop_run(main: Coroutine[Any, Any, None]) -> None:
    try:
        import uvloop
    except ImportError:  # uvicorn[standard] installs it; plain asyncio works too
        asyncio.run(main)
    else:
        uvloop.run(main)


async def _serve(config: ServerConfig, *, banner: bool, token_file: Path | None) -> None:
    ready = asyncio.Event()
    server = asyncio.create_task(serve(config, ready=ready))
    waiter = asyncio.create_task(ready.wait())
    await asyncio.wait({server, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if server.done():
        waiter.cancel()
        try:
            await server  # startup failed: raise its error
        except (
            StoreUnavailableError,
            SchemaBehindError,
            DataFolderInUseError,
            UnixSocketError,
        ) as exc:
            raise CliError(str(exc), code="UNAVAILABLE", exit_code=EXIT_REQUEST_FAILED) from exc
        except OSError as exc:  # typically the port is taken
            raise CliError(
                f"cannot listen on {config.host}:{config.port}: {exc.strerror or exc}",
                code="UNAVAILABLE",
                exit_code=EXIT_REQUEST_FAILED,
            ) from exc
        return
    address = _listening_address(config)
    if banner:
        _banner(config, address, token_file)
    else:
        _info(f"dex server listening on {address} (store: {_store_label(config)})")
        if config.unix_socket is not None:
            _info(f"and on the Unix socket {config.unix_socket} (unix://{config.unix_socket})")
        if config.web:
            _info(f"Dex Web: http://{address}/ui")
        if config.token is None and not is_loopback(config.host):
            _info("warning: no token (--token-file or DEX_SERVER_TOKEN): anyone can connect")
    await server


def _listening_address(config: ServerConfig) -> str:
    if config.address_file is not None and config.address_file.exists():
        return config.address_file.read_text().strip()
    return f"{config.host}:{config.port}"


def _token_lines(token_file: Path | None) -> list[str]:
    # How to send the token, naming the real file when known; never the token itself.
    shell = shlex.quote(str(token_file.resolve())) if token_file else "TOKEN_FILE"
    python = json.dumps(str(token_file.resolve())) if token_file else '"TOKEN_FILE"'
    return [
        "Every request needs the server's token. Pass it:",
        f'  export DEX_TOKEN="$(cat {shell})"   # read by Workers, Clients and dexcli',
        f"  dex.WorkerOptions(..., credential=dex.FileCredential({python}))",
        '  dex.ClientOptions(..., credential="the token")   # or ApiKeyCredential(...)',
        "",
    ]


def _banner(config: ServerConfig, address: str, token_file: Path | None) -> None:
    lines = [
        f"Dex dev server listening on {address}",
        f"  store:      {_store_label(config)}",
        f"  retention:  closed Flows kept {human_duration(config.retention_s)}",
        f"  auth:       {'bearer token required' if config.token else 'none (loopback only)'}",
        "",
        "Point Workers and Clients at it:",
        f"  export DEX_SERVER_ADDRESS={address}",
        f'  dex.WorkerOptions(server_address="{address}")',
        f'  dex.ClientOptions(server_address="{address}")',
        f"  dexcli --server {address} flow list",
        *(
            [f"  (or, on this machine: unix://{config.unix_socket})"]
            if config.unix_socket is not None
            else []
        ),
        "",
        *(_token_lines(token_file) if config.token else []),
        *([f"Dex Web (the browser UI): http://{address}/ui", ""] if config.web else []),
        "Press Ctrl-C to stop.",
    ]
    _info("\n".join(lines))


def _store_label(config: ServerConfig) -> str:
    if config.database_url is not None:
        from dex_server.store.postgres import redact

        return f"postgres {redact(config.database_url)}"
    return f"sqlite {config.database_path}"


def _info(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
