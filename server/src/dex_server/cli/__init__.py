"""``dexcli``: run a Dex server and look at Flows from the command line.

Commands: ``dev`` (embedded development server), ``server`` (production server),
``flow list|show|history|stop``, ``health``, ``version``. Global options ``--server``
(env ``DEX_SERVER_ADDRESS``), ``--token`` (env ``DEX_TOKEN``), ``--output table|json`` and
``--timeout``. Errors are one line on stderr (a JSON object with ``--output json``); the exit
code is 1 when a request failed and 2 for usage errors and missing confirmations.

Every command that talks to a server uses the public ``dex.AsyncClient``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import typer
import typer.main
from dex.errors import DexServiceError, WorkerInvocationError
from typer.exceptions import TyperException

from dex_server.cli._app import app
from dex_server.cli._output import (
    EXIT_REQUEST_FAILED,
    EXIT_USAGE,
    CliError,
    OutputFormat,
    Printer,
)

__all__ = ["app", "main"]


def _format_from_argv(argv: Sequence[str]) -> OutputFormat:
    # Errors raised while parsing still honour --output json.
    for i, arg in enumerate(argv):
        value = None
        if arg in ("--output", "-o") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--output="):
            value = arg.split("=", 1)[1]
        if value == OutputFormat.JSON.value:
            return OutputFormat.JSON
    return OutputFormat.TABLE


def main(argv: Sequence[str] | None = None) -> None:
    """Run the ``dexcli`` command line and exit with its status.

    Args:
        argv: arguments without the program name (default: ``sys.argv[1:]``).

    """
    args = list(sys.argv[1:] if argv is None else argv)
    out = Printer(fmt=_format_from_argv(args))
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=args, prog_name="dexcli", standalone_mode=False)
    except CliError as err:
        out.error(err)
        sys.exit(err.exit_code)
    except DexServiceError as exc:
        stack = exc.worker_stack_trace if isinstance(exc, WorkerInvocationError) else None
        message = str(exc) + (f": {stack}" if stack else "")
        out.error(CliError(message, code=exc.error_code, exit_code=EXIT_REQUEST_FAILED))
        sys.exit(EXIT_REQUEST_FAILED)
    except TyperException as exc:  # command-line parsing: usage errors
        if type(exc).__name__ != "NoArgsIsHelpError":  # that one already printed the help
            out.error(CliError(exc.format_message(), code="USAGE", exit_code=EXIT_USAGE))
        sys.exit(EXIT_USAGE)
    except typer.Abort:
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)
