"""An append-only, cross-process log of real model and tool calls."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, kw_only=True)
class InvocationRecord:
    """One recorded call.

    Attributes:
        kind: what ran, for example ``"model"`` or ``"tool:lookup_order"``.
        key: which call it was, for example an idempotency key.
        pid: the process that recorded it.
        time: wall-clock seconds since the epoch.
        detail: free-form text (for example ``"attempt=2"``), or None.

    """

    kind: str
    key: str
    pid: int
    time: float
    detail: str | None = None


class InvocationLog:
    """Counts real calls across Worker processes, so a test can prove nothing ran twice.

    Each :meth:`record` appends one JSON line with a single ``write`` on a file opened in
    append mode, so several processes may record at once and a SIGKILL never leaves half
    a line behind the lines already written. Reading is a scan of the file: use it from
    tests, not on a hot path.

    Args:
        path: the log file; created (with its parent directory) on the first record.

    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def record(self, kind: str, key: str, detail: str | None = None) -> None:
        """Append one call (thread- and process-safe).

        Args:
            kind: what ran (``"model"``, ``"tool:<name>"``, ...).
            key: which call (idempotency key, turn and call index, ...).
            detail: optional free-form text.

        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(
            {"kind": kind, "key": key, "pid": os.getpid(), "time": time.time(), "detail": detail},
            separators=(",", ":"),
        )
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)

    def entries(self) -> list[InvocationRecord]:
        """Every recorded call, oldest first."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        records: list[InvocationRecord] = []
        for line in text.splitlines():
            if not line.strip():
                continue
            raw = json.loads(line)
            records.append(
                InvocationRecord(
                    kind=str(raw["kind"]),
                    key=str(raw["key"]),
                    pid=int(raw["pid"]),
                    time=float(raw["time"]),
                    detail=raw.get("detail"),
                )
            )
        return records

    def count(self, kind: str, key: str | None = None) -> int:
        """How many calls of ``kind`` (and of ``key``, when given) were recorded."""
        return sum(
            1
            for entry in self.entries()
            if entry.kind == kind and (key is None or entry.key == key)
        )

    def keys(self, kind: str) -> list[str]:
        """Return the keys recorded for ``kind``, oldest first (repeats kept)."""
        return [entry.key for entry in self.entries() if entry.kind == kind]
