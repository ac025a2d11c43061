"""How dexcli prints: JSON for programs, Rich tables for people, one-line errors."""

from __future__ import annotations

import enum
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

# Exit codes shared by every command (documented in docs/cli.md).
EXIT_OK = 0
EXIT_REQUEST_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_NO_WORKER = 5

# Piped output is not wrapped: a table row stays one line however wide it is.
_PIPE_WIDTH = 10_000


class OutputFormat(enum.StrEnum):
    TABLE = "table"
    JSON = "json"


@dataclass(frozen=True, kw_only=True)
class Connection:
    """Where and how to reach the server (the global options)."""

    server: str
    token: str | None
    timeout_s: float


class CliError(Exception):
    """A failure to report as one line on stderr, with its exit code."""

    def __init__(self, message: str, *, code: str, exit_code: int) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.exit_code = exit_code


def usage_error(message: str) -> CliError:
    return CliError(message, code="USAGE", exit_code=EXIT_USAGE)


def not_found(message: str, *, code: str = "NOT_FOUND") -> CliError:
    return CliError(message, code=code, exit_code=EXIT_NOT_FOUND)


@dataclass(frozen=True, kw_only=True)
class Printer:
    """Writes results to stdout and errors to stderr in the chosen format."""

    fmt: OutputFormat = OutputFormat.TABLE

    @property
    def json(self) -> bool:
        return self.fmt is OutputFormat.JSON

    def emit_json(self, obj: object) -> None:
        # msgspec passes msgspec.Raw values (history payloads) through untouched.
        data = msgspec.json.format(msgspec.json.encode(obj), indent=2)
        sys.stdout.write(data.decode() + "\n")
        sys.stdout.flush()

    def table(
        self, title: str | None, columns: Sequence[str], rows: Sequence[Sequence[str]]
    ) -> None:
        table = Table(
            title=Text(title) if title else None,
            box=box.SIMPLE_HEAD,
            pad_edge=False,
            header_style="bold",
        )
        # Identifiers and times stay on one line; only the last column wraps.
        for i, column in enumerate(columns):
            last = i == len(columns) - 1
            table.add_column(column, overflow="fold", no_wrap=not last)
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))  # values are never markup
        self.console().print(table)

    def fields(self, pairs: Sequence[tuple[str, str]]) -> None:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for key, value in pairs:
            table.add_row(key, Text(value))
        self.console().print(table)

    def line(self, text: str) -> None:
        self.console().print(text, highlight=False, markup=False, soft_wrap=True)

    def console(self) -> Console:
        if sys.stdout.isatty():
            return Console(soft_wrap=False)
        return Console(soft_wrap=False, width=_PIPE_WIDTH, no_color=True)

    def emit_json_line(self, obj: object) -> None:
        """One compact JSON document per line (``--follow`` streams)."""
        sys.stdout.write(msgspec.json.encode(obj).decode() + "\n")
        sys.stdout.flush()

    def error(self, err: CliError) -> None:
        if self.json:
            body = msgspec.json.encode({"error": {"code": err.code, "message": err.message}})
            sys.stderr.write(body.decode() + "\n")
        else:
            sys.stderr.write(f"error: {_one_line(err.message)}\n")
        sys.stderr.flush()


def _one_line(text: str) -> str:
    return " ".join(text.split())


def rfc3339(unix_s: float | None) -> str | None:
    """Format unix seconds as RFC 3339 UTC with a ``Z`` suffix (None stays None)."""
    if unix_s is None:
        return None
    stamp = datetime.fromtimestamp(unix_s, UTC).isoformat(timespec="microseconds")
    return stamp.replace("+00:00", "Z")


def human_time(unix_s: float | None, *, short: bool = False) -> str:
    """UTC time for tables; ``short`` drops the year (``11-29 08:50:35.123``)."""
    if unix_s is None:
        return "-"
    fmt = "%m-%d %H:%M:%S.%f" if short else "%Y-%m-%d %H:%M:%S.%f"
    return datetime.fromtimestamp(unix_s, UTC).strftime(fmt)[:-3]


def camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def camel_keys(obj: Any) -> Any:
    """Recursively rename snake_case dict keys to camelCase (JSON output convention)."""
    if isinstance(obj, dict):
        return {camel(str(k)): camel_keys(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [camel_keys(v) for v in obj]
    return obj
