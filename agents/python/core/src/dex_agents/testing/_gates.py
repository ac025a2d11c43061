"""File gates: pause a Worker child at an exact point so a test can act there."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

_POLL_S = 0.01


class FileGate:
    """A named rendezvous between a Worker child process and the test process.

    The child calls :meth:`mark_reached` at the point of interest and then awaits
    :meth:`wait_for_release`; the test awaits :meth:`wait_until_reached`, acts (for example
    SIGKILLs the Worker), and calls :meth:`release`. A released gate lets every later
    arrival straight through, so a retry on a replacement Worker does not block again.

    The gate is two files in ``state_dir``: ``<name>.reached`` (one line per arrival) and
    ``<name>.released``. Both sides may live in different processes; nothing is held in
    memory.

    Args:
        state_dir: a directory both processes can reach (created when missing).
        name: the gate name; one file-name component.

    Raises:
        ValueError: the name is empty or contains a path separator.

    """

    def __init__(self, state_dir: str | os.PathLike[str], name: str) -> None:
        if not name or "/" in name or name in {".", ".."}:
            raise ValueError(f"invalid gate name {name!r}")
        self.name = name
        self.state_dir = Path(state_dir)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._reached = self.state_dir / f"{name}.reached"
        self._released = self.state_dir / f"{name}.released"

    # ------------------------------------------------------------------ child side

    def mark_reached(self) -> None:
        """Record that a process arrived at the gate (safe from any thread or process)."""
        fd = os.open(self._reached, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            os.write(fd, f"{os.getpid()}\n".encode())
        finally:
            os.close(fd)

    async def wait_for_release(self, timeout: float | None = None) -> None:
        """Wait until the test released the gate.

        Args:
            timeout: seconds to wait; None waits until released (or the process dies).

        Raises:
            TimeoutError: the gate was not released within ``timeout``.

        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_released():
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"gate {self.name!r} was not released within {timeout}s")
            await asyncio.sleep(_POLL_S)

    async def pass_through(self) -> None:
        """Mark the gate reached, then wait for its release (the usual child-side call).

        One pass of the event loop comes first, so the frames a Worker queued before the
        gate (a task's Stream writes and heartbeats) are written before the mark: a test
        that kills the process at the gate knows the server got them.
        """
        await asyncio.sleep(0)
        self.mark_reached()
        await self.wait_for_release()

    # ------------------------------------------------------------------ test side

    async def wait_until_reached(self, timeout: float = 30.0, *, count: int = 1) -> None:
        """Wait until ``count`` arrivals were recorded.

        Args:
            timeout: seconds to wait (default 30).
            count: the number of arrivals to wait for (default 1).

        Raises:
            TimeoutError: fewer arrivals than ``count`` within ``timeout``.

        """
        deadline = time.monotonic() + timeout
        while self.reached_count() < count:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"gate {self.name!r} reached {self.reached_count()} time(s), "
                    f"expected {count} within {timeout}s"
                )
            await asyncio.sleep(_POLL_S)

    def release(self) -> None:
        """Open the gate for every current and future arrival."""
        self._released.touch()

    def is_reached(self) -> bool:
        """Whether any process arrived at the gate."""
        return self.reached_count() > 0

    def is_released(self) -> bool:
        """Whether the test released the gate."""
        return self._released.exists()

    def reached_count(self) -> int:
        """How many arrivals were recorded, across every process."""
        try:
            data = self._reached.read_bytes()
        except FileNotFoundError:
            return 0
        return data.count(b"\n")

    def __repr__(self) -> str:
        return f"FileGate({str(self.state_dir)!r}, {self.name!r})"
