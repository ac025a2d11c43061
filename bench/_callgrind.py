"""Counting a process's instructions with valgrind's callgrind, for the ``*_ir`` benches."""

from __future__ import annotations

import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def command(out: Path, *args: str) -> list[str]:
    """``python ARGS`` (this interpreter) under callgrind, its counts written to ``out``.

    Address-space randomisation is off (``setarch -R``, where it exists): objects hashed by
    address would otherwise land in other dict slots and the garbage collector would run at
    other moments from one run to the next, a spread of a percent or two in the counts.
    Set ``PYTHONHASHSEED`` too (``environment``) for the same reason with strings.
    """
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, *args]
    setarch = shutil.which("setarch")
    return [setarch, "-R", *cmd] if setarch is not None else cmd


def environment(env: dict[str, str]) -> dict[str, str]:
    """``env`` with a fixed string hash seed, for counts that repeat between runs."""
    return {**env, "PYTHONHASHSEED": "0"}


def totals(out: Path) -> int:
    """The instructions a finished callgrind run counted in all."""
    for line in out.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise SystemExit(f"no totals line in {out}")


@contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    """A scratch folder for the counted runs, removed after; valgrind must be installed."""
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (Debian: apt-get install valgrind)")
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
