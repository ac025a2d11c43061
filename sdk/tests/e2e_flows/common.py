"""Small helpers shared by the end-to-end Flows: file logs that count side effects.

A Step that must prove how often it ran appends one line to a log file in the directory
named by ``DEX_TEST_GATE_DIR`` (the Worker child's gate directory). Lines are appended with
``O_APPEND`` writes of a few bytes, so lines from concurrent processes never interleave.
"""

from __future__ import annotations

import os
from pathlib import Path

from dex import AsyncContext, Context

from tests.support import GATE_DIR_ENV


def log_dir() -> Path:
    """The directory that Steps write their logs into (the Worker child's gate directory)."""
    directory = os.environ.get(GATE_DIR_ENV)
    if not directory:
        raise RuntimeError(f"{GATE_DIR_ENV} is not set for this Worker")
    return Path(directory)


def append_log(name: str, line: str) -> None:
    """Append ``line`` to the log ``<name>.log`` in the gate directory."""
    fd = os.open(log_dir() / f"{name}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def read_log(directory: str | os.PathLike[str], name: str) -> list[str]:
    """The lines of the log ``<name>.log`` in ``directory`` (empty if it does not exist)."""
    path = Path(directory) / f"{name}.log"
    try:
        return path.read_text().splitlines()
    except FileNotFoundError:
        return []


def async_context(context: Context) -> AsyncContext:
    """The AsyncContext that async handlers receive (their signature keeps ``Context``)."""
    if not isinstance(context, AsyncContext):
        raise TypeError(f"an async handler got {type(context).__name__}, not AsyncContext")
    return context
