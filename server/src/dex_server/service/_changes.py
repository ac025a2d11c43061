"""A change counter: wakes live readers (history feeds, pages) when a run changed.

Every committed job that touches a run bumps the counter once (``Runtime.apply``); with a
shared store the signals of other servers bump it too. Readers remember the value they saw
and wait for a larger one, so a bump between two waits is never lost. It costs one integer
and one event, however many readers wait.
"""

from __future__ import annotations

import asyncio
import contextlib


class Changes:
    """A monotonically increasing count of committed changes on this server."""

    def __init__(self) -> None:
        self.count = 0
        self._event = asyncio.Event()

    def bump(self) -> None:
        """Record a change and wake every waiter."""
        self.count += 1
        event, self._event = self._event, asyncio.Event()
        event.set()

    async def wait(self, seen: int, timeout_s: float) -> int:
        """Wait until the count passes ``seen`` or ``timeout_s`` passed; return the count."""
        if self.count == seen:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), timeout_s)
        return self.count
