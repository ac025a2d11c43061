"""File gates: stop a child process at an exact point of its code, from a test.

In the child (a Step handler, say)::

    gate = FileGate.from_env("before-commit")
    gate.mark_reached()        # tells the test we are here
    gate.wait_for_release()    # blocks until the test releases (or kills us)

In the test::

    gate = FileGate(tmp_path, "before-commit")
    gate.wait_until_reached(timeout=10)
    worker.kill()              # SIGKILL exactly at that point, or gate.release()

A gate is two files in ``directory``: ``<name>.reached`` (written by the child, holding a
count of how many times it was reached) and ``<name>.released``. Files make the gate work
across processes and survive the death of the process that reached it.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

GATE_DIR_ENV = "DEX_TEST_GATE_DIR"

_POLL_S = 0.01


class FileGate:
    """A named rendezvous point between a test and a child process.

    Args:
        directory: a directory both processes can see (usually pytest's ``tmp_path``).
        name: the gate's name, unique within ``directory``; letters, digits, ``-_.``.
    """

    def __init__(self, directory: str | os.PathLike[str], name: str) -> None:
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"bad gate name {name!r}")
        self.directory = Path(directory)
        self.name = name
        self._reached = self.directory / f"{name}.reached"
        self._released = self.directory / f"{name}.released"

    @classmethod
    def from_env(cls, name: str) -> FileGate:
        """Build the gate in the directory named by the ``DEX_TEST_GATE_DIR`` env variable."""
        directory = os.environ.get(GATE_DIR_ENV)
        if not directory:
            raise RuntimeError(f"{GATE_DIR_ENV} is not set")
        return cls(directory, name)

    # ------------------------------------------------------------------ child side

    def mark_reached(self) -> None:
        """Record that the gate was reached (once more); safe to call repeatedly."""
        count = self.reached_count() + 1
        tmp = self.directory / f".{self.name}.reached.{os.getpid()}"
        tmp.write_text(str(count))
        os.replace(tmp, self._reached)

    def wait_for_release(self, timeout: float | None = None) -> None:
        """Block until the test calls ``release()``; raise ``TimeoutError`` after ``timeout``."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._released.exists():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"gate {self.name!r} was not released in {timeout}s")
            time.sleep(_POLL_S)

    async def async_wait_for_release(self, timeout: float | None = None) -> None:
        """Like ``wait_for_release`` without blocking the event loop (for async handlers)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._released.exists():
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"gate {self.name!r} was not released in {timeout}s")
            await asyncio.sleep(_POLL_S)

    def pass_through(self) -> None:
        """``mark_reached()`` then ``wait_for_release()``: the usual child-side call."""
        self.mark_reached()
        self.wait_for_release()

    async def async_pass_through(self) -> None:
        """Async ``pass_through``."""
        self.mark_reached()
        await self.async_wait_for_release()

    # ------------------------------------------------------------------ test side

    def reached_count(self) -> int:
        """How many times the gate has been reached so far (0 if never)."""
        try:
            return int(self._reached.read_text() or "0")
        except FileNotFoundError:
            return 0
        except ValueError:  # torn read is impossible with os.replace, but be tolerant
            return 0

    def is_reached(self) -> bool:
        """Whether the gate has been reached at least once."""
        return self._reached.exists()

    def wait_until_reached(self, timeout: float = 10.0, *, count: int = 1) -> None:
        """Block until the gate was reached ``count`` times; ``TimeoutError`` after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self.reached_count() < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"gate {self.name!r} reached {self.reached_count()} of {count} times "
                    f"in {timeout}s"
                )
            time.sleep(_POLL_S)

    async def async_wait_until_reached(self, timeout: float = 10.0, *, count: int = 1) -> None:
        """Async ``wait_until_reached`` (for async tests)."""
        deadline = time.monotonic() + timeout
        while self.reached_count() < count:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"gate {self.name!r} reached {self.reached_count()} of {count} times "
                    f"in {timeout}s"
                )
            await asyncio.sleep(_POLL_S)

    def release(self) -> None:
        """Let every current and future waiter of this gate continue."""
        self._released.touch()

    def __repr__(self) -> str:
        return f"FileGate({str(self.directory)!r}, {self.name!r})"
