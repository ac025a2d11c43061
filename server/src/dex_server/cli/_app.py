"""The Typer application: global options and the command tree of ``dexcli``."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any

import typer

from dex_server.cli._output import CliError, Connection, OutputFormat, Printer, usage_error

DEFAULT_SERVER = "localhost:8801"
DEFAULT_RPC_TIMEOUT_S = 10.0

app = typer.Typer(
    name="dexcli",
    help="Run a Dex server and look at its Flows and agent sessions.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
flow_app = typer.Typer(help="List, inspect and stop Flows.", no_args_is_help=True)
app.add_typer(flow_app, name="flow")
session_app = typer.Typer(
    help="List, inspect and answer agent sessions (dex-agents).", no_args_is_help=True
)
app.add_typer(session_app, name="session")


class _State:
    """Global options, kept on the Click context for the subcommands."""

    def __init__(self, conn: Connection, out: Printer) -> None:
        self.conn = conn
        self.out = out


def _state(ctx: typer.Context) -> _State:
    obj = ctx.find_root().obj
    assert isinstance(obj, _State)
    return obj


def _run(coro: Coroutine[Any, Any, None]) -> None:
    asyncio.run(coro)


@app.callback()
def _global(
    ctx: typer.Context,
    server: Annotated[
        str,
        typer.Option("--server", envvar="DEX_SERVER_ADDRESS", help="Server address host:port."),
    ] = DEFAULT_SERVER,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="DEX_TOKEN", help="Bearer token for the server."),
    ] = None,
    output: Annotated[
        OutputFormat, typer.Option("--output", "-o", help="table for people, json for programs.")
    ] = OutputFormat.TABLE,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Request timeout in seconds (0: none).", min=0)
    ] = 30.0,
) -> None:
    ctx.obj = _State(
        Connection(server=server, token=token or None, timeout_s=timeout),
        Printer(fmt=output),
    )


# --------------------------------------------------------------------------- servers

_UnixSocketOption = Annotated[
    Path | None,
    typer.Option(
        "--unix-socket",
        help="Also listen on this Unix socket (Workers on this machine: unix:///PATH).",
    ),
]


@app.command()
def dev(
    data_dir: Annotated[
        Path, typer.Option("--data-dir", help="Folder for the SQLite store.")
    ] = Path(".dex"),
    port: Annotated[int, typer.Option("--port", help="Port (0 picks a free one).")] = 8801,
    host: Annotated[str, typer.Option("--host", help="Loopback address to bind.")] = "127.0.0.1",
    address_file: Annotated[
        Path | None,
        typer.Option("--address-file", help="Write host:port here once listening."),
    ] = None,
    retention: Annotated[
        str, typer.Option("--retention", help="How long closed Flows are kept.")
    ] = "1d",
    engine: Annotated[str, typer.Option("--engine", help="Engine (zd, the only one).")] = "zd",
    token_file: Annotated[
        Path | None, typer.Option("--token-file", help="Require this bearer token.")
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url", help="postgresql://... instead of SQLite in DATA_DIR (optional)."
        ),
    ] = None,
    no_web: Annotated[
        bool, typer.Option("--no-web", help="Do not serve Dex Web (the browser UI at /ui).")
    ] = False,
    unix_socket: _UnixSocketOption = None,
) -> None:
    """Start a development server on SQLite in DATA_DIR (or PostgreSQL), on loopback only."""
    from dex_server.cli import _serve

    config = _serve.dev_config(
        _serve.DevArgs(
            data_dir=data_dir,
            host=host,
            port=port,
            address_file=address_file,
            retention=retention,
            engine=engine,
            token_file=token_file,
            database_url=database_url,
            web=not no_web,
            unix_socket=unix_socket,
        )
    )
    _serve.run(config, banner=True, token_file=token_file)


@app.command()
def server(
    database_url: Annotated[
        str,
        typer.Option(
            "--database-url",
            envvar="DEX_DATABASE_URL",
            help="postgresql://USER@HOST:PORT/DB (several servers may share it) or sqlite:///PATH.",
        ),
    ],
    host: Annotated[str, typer.Option("--host", help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port (0 picks a free one).")] = 8801,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="Bearer token file (else env DEX_SERVER_TOKEN)."),
    ] = None,
    retention: Annotated[
        str, typer.Option("--retention", help="How long closed Flows are kept.")
    ] = "3d",
    address_file: Annotated[
        Path | None,
        typer.Option("--address-file", help="Write host:port here once listening."),
    ] = None,
    pool_size: Annotated[
        int,
        typer.Option(
            "--pool-size",
            min=2,
            help="PostgreSQL connections: one writer, the rest for reads (default 4).",
        ),
    ] = 4,
    sqlite_cache_mib: Annotated[
        int,
        typer.Option(
            "--sqlite-cache-mib", min=1, help="SQLite page cache per store connection, MiB."
        ),
    ] = 16,
    verify_schema_only: Annotated[
        bool,
        typer.Option(
            "--verify-schema-only",
            help="Do not migrate; fail if the schema is behind (role without DDL rights).",
        ),
    ] = False,
    server_lease_s: Annotated[
        float,
        typer.Option(
            "--server-lease-s",
            min=1.0,
            help="Several servers: missed heartbeats before another takes over (seconds).",
        ),
    ] = 15.0,
    max_header_bytes: Annotated[
        int,
        typer.Option(
            "--max-header-bytes", min=1, help="Largest request head (431 above it; 64 KiB)."
        ),
    ] = 64 * 1024,
    max_header_count: Annotated[
        int,
        typer.Option("--max-header-count", min=1, help="Most request headers (431 above it)."),
    ] = 100,
    http_head_timeout_s: Annotated[
        float,
        typer.Option(
            "--http-head-timeout-s", min=0.001, help="Time to send a request head (seconds)."
        ),
    ] = 10.0,
    http_body_timeout_s: Annotated[
        float,
        typer.Option(
            "--http-body-timeout-s", min=0.001, help="Time to send a request body (seconds)."
        ),
    ] = 60.0,
    http_keep_alive_s: Annotated[
        float,
        typer.Option(
            "--http-keep-alive-s", min=0.001, help="Idle keep-alive connections close after it."
        ),
    ] = 5.0,
    max_connections: Annotated[
        int | None,
        typer.Option(
            "--max-connections",
            min=1,
            help="Most open connections, 503 above it (default: open-file limit less 64).",
        ),
    ] = None,
    max_sse_connections: Annotated[
        int,
        typer.Option(
            "--max-sse-connections", min=1, help="Most open Server-Sent Events feeds, 503 above it."
        ),
    ] = 1000,
    no_web: Annotated[
        bool, typer.Option("--no-web", help="Do not serve Dex Web (the browser UI at /ui).")
    ] = False,
    unix_socket: _UnixSocketOption = None,
) -> None:
    """Run a production server on the given database."""
    from dex_server.cli import _serve

    config = _serve.server_config(
        _serve.ServerArgs(
            database_url=database_url,
            host=host,
            port=port,
            token_file=token_file,
            retention=retention,
            address_file=address_file,
            pool_size=pool_size,
            sqlite_cache_mib=sqlite_cache_mib,
            verify_schema_only=verify_schema_only,
            server_lease_s=server_lease_s,
            http=_serve.HttpArgs(
                max_header_bytes=max_header_bytes,
                max_header_count=max_header_count,
                http_head_timeout_s=http_head_timeout_s,
                http_body_timeout_s=http_body_timeout_s,
                http_keep_alive_s=http_keep_alive_s,
                max_connections=max_connections,
                max_sse_connections=max_sse_connections,
            ),
            web=not no_web,
            unix_socket=unix_socket,
        )
    )
    _serve.run(config, banner=False)


# --------------------------------------------------------------------------- info


@app.command()
def health(ctx: typer.Context) -> None:
    """Check that the server answers and reaches its store (exit 1 when degraded)."""
    st = _state(ctx)
    from dex_server.cli import _flows

    if not asyncio.run(_flows.health(st.conn, st.out)):
        raise typer.Exit(1)


@app.command()
def version(ctx: typer.Context) -> None:
    """Print the dexcli version and wire protocol version."""
    from dex_server.cli import _flows

    _flows.show_version(_state(ctx).out)


# --------------------------------------------------------------------------- flow


@flow_app.command("list")
def flow_list(
    ctx: typer.Context,
    flow_type: Annotated[str | None, typer.Option("--type", help="Only this Flow type.")] = None,
    status: Annotated[
        str | None,
        typer.Option(
            "--status", help="Only this status: running, completed, failed, canceled, terminated."
        ),
    ] = None,
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=1000)] = 100,
    page_token: Annotated[str | None, typer.Option("--page-token")] = None,
    fetch_all: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
    query: Annotated[
        str | None,
        typer.Option(
            "--query",
            help="Search query over indexed Attributes, e.g. \"OrderStatus = 'paid' ORDER BY"
            ' Amount DESC" (with --type/--status: all must hold).',
        ),
    ] = None,
) -> None:
    """List Flows, newest first (or search them with --query)."""
    st = _state(ctx)
    from dex_server.cli import _flows

    _run(
        _flows.flow_list(
            st.conn,
            st.out,
            flow_type=flow_type,
            status=status,
            page_size=page_size,
            page_token=page_token,
            fetch_all=fetch_all,
            query=query,
        )
    )


@flow_app.command("show")
def flow_show(ctx: typer.Context, flow_id: Annotated[str, typer.Argument()]) -> None:
    """Describe a Flow (latest run) and its active Steps."""
    st = _state(ctx)
    from dex_server.cli import _flows

    _run(_flows.flow_show(st.conn, st.out, flow_id))


@flow_app.command("history")
def flow_history(
    ctx: typer.Context,
    flow_id: Annotated[str, typer.Argument()],
    run_id: Annotated[str, typer.Option("--run-id", help="Run (default: latest).")] = "",
    page_size: Annotated[int, typer.Option("--page-size", min=1, max=1000)] = 200,
    page_token: Annotated[str | None, typer.Option("--page-token")] = None,
    fetch_all: Annotated[bool, typer.Option("--all", help="Fetch every page.")] = False,
) -> None:
    """Print a Flow's history events."""
    st = _state(ctx)
    from dex_server.cli import _flows

    _run(
        _flows.flow_history(
            st.conn,
            st.out,
            flow_id,
            run_id=run_id,
            page_size=page_size,
            page_token=page_token,
            fetch_all=fetch_all,
        )
    )


@flow_app.command("stop")
def flow_stop(
    ctx: typer.Context,
    flow_id: Annotated[str, typer.Argument()],
    stop_type: Annotated[
        str, typer.Option("--type", help="cancel (default), terminate or fail.")
    ] = "cancel",
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the stop.")] = False,
) -> None:
    """Stop a running Flow (needs --yes)."""
    if not yes:
        raise usage_error(f"refusing to stop {flow_id} without --yes")
    st = _state(ctx)
    from dex_server.cli import _flows

    _run(_flows.flow_stop(st.conn, st.out, flow_id, stop_type=stop_type, reason=reason))


@flow_app.command("time-travel")
def flow_time_travel(
    ctx: typer.Context,
    flow_id: Annotated[str, typer.Argument()],
    travel_type: Annotated[
        str,
        typer.Option(
            "--type",
            help="beginning, history_event_time, step_type or step_execution_id.",
        ),
    ],
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            help="The RFC 3339 time, Step type or Step execution ID the --type names.",
        ),
    ] = None,
    step_method: Annotated[
        str | None, typer.Option("--step-method", help="wait_for or execute.")
    ] = None,
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    skip_writes_reapply: Annotated[
        bool, typer.Option("--skip-writes-reapply", help="Drop later RPC effects.")
    ] = False,
    rerun_single_attempt: Annotated[
        bool,
        typer.Option(
            "--rerun-single-attempt",
            help="Run committed single-attempt Steps again instead of taking their outcome.",
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the time travel.")] = False,
) -> None:
    """Fork a Flow's latest run into a new run from a point of its history (needs --yes)."""
    from dex_server.cli import _flows

    options = _flows.time_travel_options(
        travel_type,
        target,
        step_method,
        reason=reason,
        skip_writes_reapply=skip_writes_reapply,
        rerun_single_attempt=rerun_single_attempt,
    )
    if not yes:
        raise usage_error(f"refusing to time-travel {flow_id} without --yes")
    st = _state(ctx)
    _run(_flows.flow_time_travel(st.conn, st.out, flow_id, options))


@flow_app.command("continue-as-new")
def flow_continue_as_new(
    ctx: typer.Context,
    flow_id: Annotated[str, typer.Argument()],
    yes: Annotated[bool, typer.Option("--yes", help="Confirm.")] = False,
) -> None:
    """Make a running Flow continue as a new run (needs --yes)."""
    if not yes:
        raise usage_error(f"refusing to continue {flow_id} as new without --yes")
    st = _state(ctx)
    from dex_server.cli import _flows

    _run(_flows.flow_continue_as_new(st.conn, st.out, flow_id))


# --------------------------------------------------------------------------- session

_RpcTimeout = Annotated[
    float,
    typer.Option(
        "--rpc-timeout",
        min=0.1,
        help="Seconds to wait for a Worker to run the RPC (then: no Worker, exit 5).",
    ),
]


@session_app.command("list")
def session_list(
    ctx: typer.Context,
    status: Annotated[
        str | None,
        typer.Option(
            "--status",
            help="starting, waiting-for-message, running-model, running-tools,"
            " awaiting-approval, completed, failed, canceled, terminated; or a group:"
            " active, running, closed.",
        ),
    ] = None,
    flow_type: Annotated[
        str | None, typer.Option("--type", help="Only sessions of this Flow type.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="Most sessions listed.")] = 100,
) -> None:
    """List agent sessions, newest first (committed state: no Worker needed)."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(_sessions.session_list(st.conn, st.out, status=status, flow_type=flow_type, limit=limit))


@session_app.command("show")
def session_show(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    messages: Annotated[
        int, typer.Option("--messages", min=1, max=1000, help="Most recent messages shown.")
    ] = 50,
) -> None:
    """Show a session: conversation, pending approvals, tool calls, usage (no Worker needed)."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(_sessions.session_show(st.conn, st.out, session_id, messages=messages))


@session_app.command("send")
def session_send(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    text: Annotated[str, typer.Argument()],
    rpc_timeout: _RpcTimeout = DEFAULT_RPC_TIMEOUT_S,
) -> None:
    """Queue a user message; a running turn finishes first."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(
        _sessions.session_send(
            st.conn, st.out, session_id, text, steer=False, rpc_timeout_s=rpc_timeout
        )
    )


@session_app.command("steer")
def session_steer(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    text: Annotated[str, typer.Argument()],
    rpc_timeout: _RpcTimeout = DEFAULT_RPC_TIMEOUT_S,
) -> None:
    """End the running turn at its next safe point and start one with TEXT."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(
        _sessions.session_send(
            st.conn, st.out, session_id, text, steer=True, rpc_timeout_s=rpc_timeout
        )
    )


@session_app.command("approve")
def session_approve(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    interrupt_id: Annotated[str, typer.Argument()],
    rpc_timeout: _RpcTimeout = DEFAULT_RPC_TIMEOUT_S,
    arguments: Annotated[
        str | None,
        typer.Option("--arguments", help="Edited arguments (a JSON object) the tool runs with."),
    ] = None,
    approver: Annotated[
        str | None, typer.Option("--approver", help="Who approves (kept in the receipt).")
    ] = None,
    sha256: Annotated[
        str | None,
        typer.Option("--sha256", help="Approve only if the arguments still have this hash."),
    ] = None,
) -> None:
    """Approve a pending tool call (INTERRUPT is its interrupt ID, see `session show`)."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(
        _sessions.session_resolve(
            st.conn,
            st.out,
            session_id,
            interrupt_id,
            approved=True,
            reason=None,
            rpc_timeout_s=rpc_timeout,
            arguments=arguments,
            approver=approver,
            arguments_sha256=sha256,
        )
    )


@session_app.command("answer")
def session_answer(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    interrupt_id: Annotated[str, typer.Argument()],
    answer: Annotated[
        str | None,
        typer.Option("--json", help="The answer: a JSON object of the fields the question asks."),
    ] = None,
    decline: Annotated[
        bool, typer.Option("--decline", help="Decline to answer; the tool is told so.")
    ] = False,
    rpc_timeout: _RpcTimeout = DEFAULT_RPC_TIMEOUT_S,
) -> None:
    """Answer a tool's pending question (an interrupt of kind question, see `session show`)."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(
        _sessions.session_answer(
            st.conn,
            st.out,
            session_id,
            interrupt_id,
            answer=answer,
            decline=decline,
            rpc_timeout_s=rpc_timeout,
        )
    )


@session_app.command("reconcile")
def session_reconcile(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    tool_call_id: Annotated[str, typer.Argument()],
    note: Annotated[str, typer.Option("--note", help="The evidence; the model sees it.")],
    succeeded: Annotated[
        bool,
        typer.Option("--succeeded/--failed", help="Whether the write took effect."),
    ] = True,
    by: Annotated[str, typer.Option("--by", help="Who settles it (recorded).")] = "",
    rpc_timeout: _RpcTimeout = DEFAULT_RPC_TIMEOUT_S,
) -> None:
    """Settle a tool call whose outcome is unknown (status awaiting_reconciliation)."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(
        _sessions.session_reconcile(
            st.conn,
            st.out,
            session_id,
            tool_call_id,
            succeeded=succeeded,
            note=note,
            reconciled_by=by,
            rpc_timeout_s=rpc_timeout,
        )
    )


@session_app.command("reject")
def session_reject(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    interrupt_id: Annotated[str, typer.Argument()],
    reason: Annotated[
        str | None, typer.Option("--reason", help="Told to the model as the tool's result.")
    ] = None,
    rpc_timeout: _RpcTimeout = DEFAULT_RPC_TIMEOUT_S,
) -> None:
    """Reject a pending tool call; the tool does not run."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(
        _sessions.session_resolve(
            st.conn,
            st.out,
            session_id,
            interrupt_id,
            approved=False,
            reason=reason,
            rpc_timeout_s=rpc_timeout,
        )
    )


@session_app.command("cancel")
def session_cancel(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    rpc_timeout: _RpcTimeout = DEFAULT_RPC_TIMEOUT_S,
) -> None:
    """Cancel the running turn (the session stays open for the next message)."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(_sessions.session_cancel(st.conn, st.out, session_id, rpc_timeout_s=rpc_timeout))


@session_app.command("stop")
def session_stop(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    reason: Annotated[str | None, typer.Option("--reason")] = None,
    yes: Annotated[bool, typer.Option("--yes", help="Confirm the stop.")] = False,
) -> None:
    """Stop (cancel) the session's Flow for good (needs --yes); it stays readable."""
    if not yes:
        raise usage_error(f"refusing to stop session {session_id} without --yes")
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(_sessions.session_stop(st.conn, st.out, session_id, reason))


@session_app.command("events")
def session_events(
    ctx: typer.Context,
    session_id: Annotated[str, typer.Argument()],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events as they arrive.")
    ] = False,
    resume_token: Annotated[
        str, typer.Option("--resume-token", help="Start after this event (default: oldest).")
    ] = "",
    until_turn_end: Annotated[
        bool,
        typer.Option("--until-turn-end", help="Stop after a turn completes, fails or ends."),
    ] = False,
    stop_after: Annotated[
        float | None,
        typer.Option("--stop-after", min=0.0, help="Stop following after this many seconds."),
    ] = None,
) -> None:
    """Print the session's AgentEvents, highest attempt per Step execution (no Worker needed)."""
    st = _state(ctx)
    from dex_server.cli import _sessions

    _run(
        _sessions.session_events(
            st.conn,
            st.out,
            session_id,
            follow=follow,
            resume_token=resume_token,
            until_turn_end=until_turn_end,
            stop_after_s=stop_after,
        )
    )


__all__ = ["CliError", "app"]
