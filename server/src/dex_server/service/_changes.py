"""A change counter: wakes live readers (history feeds, pages) when a run changed.

Every committed job that touches runs bumps the counter once (``Runtime.apply``), naming
the runs; the signals of other servers sharing the store bump it without names (this
server cannot tell which run changed). Readers remember what they saw and wait for more,
so a bump between two waits is never lost. A reader of one run registers it
(:meth:`Changes.watching`) and is woken for that run's changes, and for unnamed ones,
only: the bookkeeping is one entry per watched run, gone with its last reader.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable, Iterator

Mark = tuple[int, int]


class Changes:
    """A monotonically increasing count of committed changes on this server."""

    def __init__(self) -> None:
        self.count = 0
        self._unnamed = 0  # the count at the last change of unknown runs
        self._runs: dict[str, int] = {}  # watched run -> the count at its last change
        self._watchers: dict[str, int] = {}
        self._event = asyncio.Event()

    def bump(self, run_ids: Iterable[str] | None = None) -> None:
        """Record a change of ``run_ids`` (None: of runs unknown) and wake every waiter."""
        self.count += 1
        if run_ids is None:
            self._unnamed = self.count
        else:
            for r in run_ids:
                if r in self._watchers:
                    self._runs[r] = self.count
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, seen: int, timeout_s: float) -> int:
        """Wait until the count passes ``seen`` or ``timeout_s`` passed; return the count."""
        if self.count == seen:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout_s):
                    await self._event.wait()
        return self.count

    @contextlib.contextmanager
    def watching(self, run_id: str) -> Iterator[None]:
        """Track the changes of ``run_id`` while the block runs (see :meth:`mark`)."""
        self._watchers[run_id] = self._watchers.get(run_id, 0) + 1
        try:
            yield
        finally:
            left = self._watchers[run_id] - 1
            if left:
                self._watchers[run_id] = left
            else:
                del self._watchers[run_id]
                self._runs.pop(run_id, None)

    def mark(self, run_id: str) -> Mark:
        """What a reader of ``run_id`` has seen; it moves on with that run's changes."""
        return self._unnamed, self._runs.get(run_id, 0)

    async def wait_run(self, run_id: str, seen: Mark, timeout_s: float) -> bool:
        """Wait (inside :meth:`watching`) until ``mark(run_id)`` moves past ``seen``.

        Returns whether it did within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while self.mark(run_id) == seen:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await self.wait(self.count, left)
        return True
