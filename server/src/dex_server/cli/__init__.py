"""``dexcli``: run a Dex server and look at Flows and agent sessions from the command line.

Commands: ``dev`` (embedded development server), ``server`` (production server),
``flow list|show|history|stop``, ``session list|show|send|approve|reject|steer|cancel|stop|
events``, ``health``, ``version``. Global options ``--server`` (env ``DEX_SERVER_ADDRESS``),
``--token`` (env ``DEX_TOKEN``), ``--output table|json`` (``-o``) and ``--timeout`` may come
before or after the command. Errors are one line on stderr (a JSON object with
``--output json``); the exit codes are listed in ``docs/cli.md`` (0 ok, 1 request failed,
2 usage, 3 not found, 4 server unreachable, 5 no Worker).

Every command that talks to a server uses the server's public HTTP API (mostly through
``dex.AsyncClient``). This module imports little at start-up so that ``dexcli version`` and
``--help`` answer quickly; the heavy imports happen inside the commands.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dex_server.cli._output import CliError

__all__ = ["main"]

# The wire protocol this CLI speaks; a test pins it to dex._protocol.PROTOCOL_VERSION.
# Kept here so that ``dexcli version`` does not import the SDK.
PROTOCOL_VERSION = 1

DEFAULT_SERVER = "localhost:8801"

# Global options (each takes a value); they are moved in front of the command,
# so ``dexcli flow history X -o json`` works like ``dexcli -o json flow history X``.
_GLOBAL_OPTIONS = ("--server", "--token", "--output", "-o", "--timeout")


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """Move global options (anywhere before a ``--``) to the front, keeping their order.

    Raises nothing: a global option missing its value is left in place for the parser
    to report.
    """
    front: list[str] = []
    rest: list[str] = []
    i = 0
    args = list(argv)
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest.extend(args[i:])
            break
        name = arg.split("=", 1)[0]
        if name in _GLOBAL_OPTIONS and "=" in arg:
            front.append(arg)
        elif arg in _GLOBAL_OPTIONS and i + 1 < len(args):
            front.extend(args[i : i + 2])
            i += 1
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            front.append(arg)  # -ojson
        else:
            rest.append(arg)
        i += 1
    return front + rest


def _global_values(args: Sequence[str]) -> dict[str, str]:
    # the hoisted options' values (last one wins, as for the parser)
    values: dict[str, str] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            break
        if "=" in arg and arg.split("=", 1)[0] in _GLOBAL_OPTIONS:
            name, value = arg.split("=", 1)
            values[name] = value
        elif arg in _GLOBAL_OPTIONS and i + 1 < len(args):
            values[arg] = args[i + 1]
            i += 1
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            values["-o"] = arg[2:]
        i += 1
    if "-o" in values:
        values["--output"] = values.pop("-o")
    return values


def _command_words(args: Sequence[str]) -> list[str]:
    # the words left once the global options (and their values) are taken out
    words: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in _GLOBAL_OPTIONS:
            i += 2
            continue
        if arg.split("=", 1)[0] in _GLOBAL_OPTIONS or (
            arg.startswith("-o") and not arg.startswith("--")
        ):
            i += 1
            continue
        words.append(arg)
        i += 1
    return words


def _cli_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dex-server")
    except PackageNotFoundError:  # running from a source tree without metadata
        return "0+unknown"


def _print_version(as_json: bool) -> None:
    cli = _cli_version()
    if as_json:
        import json

        sys.stdout.write(json.dumps({"dexcli": cli, "protocol": PROTOCOL_VERSION}, indent=2))
        sys.stdout.write("\n")
    else:
        sys.stdout.write(f"dexcli {cli} (protocol {PROTOCOL_VERSION})\n")
    sys.stdout.flush()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``dexcli`` command line and exit with its status.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    """
    args = hoist_global_options(sys.argv[1:] if argv is None else argv)
    values = _global_values(args)
    as_json = values.get("--output") == "json"
    if _command_words(args) == ["version"] and values.get("--output", "table") in (
        "table",
        "json",
    ):
        _print_version(as_json)  # fast path: no Typer, no SDK
        sys.exit(0)
    server = values.get("--server") or os.environ.get("DEX_SERVER_ADDRESS") or DEFAULT_SERVER
    sys.exit(_run(args, as_json=as_json, server=server))


def _run(args: list[str], *, as_json: bool, server: str) -> int:
    import typer
    import typer.main
    from dex.errors import DexServiceError
    from typer.exceptions import TyperException

    from dex_server.cli._app import app
    from dex_server.cli._output import EXIT_USAGE, CliError, OutputFormat, Printer

    out = Printer(fmt=OutputFormat.JSON if as_json else OutputFormat.TABLE)
    command = typer.main.get_command(app)
    try:
        rv: Any = command.main(args=args, prog_name="dexcli", standalone_mode=False)
    except CliError as err:
        out.error(err)
        return err.exit_code
    except DexServiceError as exc:
        mapped = service_error(exc, server)
        out.error(mapped)
        return mapped.exit_code
    except TyperException as exc:  # command-line parsing: usage errors
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one already printed the help
            out.error(CliError(exc.format_message(), code="USAGE", exit_code=EXIT_USAGE))
        return EXIT_USAGE
    except typer.Abort:
        return 130
    except KeyboardInterrupt:
        return 130
    return rv if isinstance(rv, int) else 0


def service_error(exc: Exception, server: str) -> CliError:
    """The ``CliError`` for an SDK error: its code, a message naming what failed, exit code."""
    import httpx
    from dex._protocol import ErrorCode
    from dex.errors import DexServiceError, WorkerInvocationError

    from dex_server.cli._output import (
        EXIT_NO_WORKER,
        EXIT_NOT_FOUND,
        EXIT_REQUEST_FAILED,
        EXIT_UNREACHABLE,
        CliError,
    )

    assert isinstance(exc, DexServiceError)
    code = exc.error_code
    message = str(exc)
    if isinstance(exc, WorkerInvocationError) and exc.worker_stack_trace:
        message += f": {exc.worker_stack_trace}"
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPError):  # no HTTP answer at all
        why = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        if code == ErrorCode.REQUEST_TIMEOUT:
            message = f"the Dex server at {server} did not answer in time ({why})"
        else:
            message = f"cannot reach the Dex server at {server} ({why})"
        return CliError(message, code=code, exit_code=EXIT_UNREACHABLE)
    if code in (ErrorCode.FLOW_NOT_FOUND, ErrorCode.NOT_FOUND):
        return CliError(message, code=code, exit_code=EXIT_NOT_FOUND)
    if code == ErrorCode.NO_WORKER_AVAILABLE:
        return CliError(message, code=code, exit_code=EXIT_NO_WORKER)
    if code == ErrorCode.UNAUTHENTICATED:
        # the server's text cannot know how this client takes its token
        message = (
            f"{message} by the Dex server at {server}: pass --token TOKEN "
            '(or export DEX_TOKEN="$(cat TOKEN_FILE)")'
        )
    return CliError(message, code=code, exit_code=EXIT_REQUEST_FAILED)


def __getattr__(name: str) -> Any:
    # ``dex_server.cli.app`` (the Typer app) is imported on first use only
    if name == "app":
        from dex_server.cli._app import app

        return app
    raise AttributeError(name)
