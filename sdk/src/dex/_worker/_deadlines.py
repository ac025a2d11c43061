"""One timer for the deadlines of all of a Worker session's running tasks.

A task nearly always ends long before its deadline. A timer per task (``asyncio.timeout``)
pays for a timer handle and a context manager on every task; here a task's deadline is a
dict entry, and a single timer is armed at the earliest deadline it knows of. The timer is
not disarmed when tasks end: firing with nothing due just arms it for the next deadline.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

# A loop may run a timer up to its clock's resolution early (uvloop: a millisecond); a
# deadline that close counts as passed rather than arming the timer again for the rest.
_SLACK_S = 0.002


class Deadlines:
    """Calls ``on_due(key)`` once a watched key's deadline passes (on the running loop).

    Not thread-safe: use it from the event loop's thread only.
    """

    __slots__ = ("_armed_at", "_due", "_on_due", "_timer")

    def __init__(self, on_due: Callable[[str], None]) -> None:
        self._on_due = on_due
        self._due: dict[str, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._armed_at = math.inf

    def watch(self, key: str, when: float) -> None:
        """Call ``on_due(key)`` at loop time ``when`` unless :meth:`forget` comes first."""
        self._due[key] = when
        if when < self._armed_at:
            self._arm(when)

    def forget(self, key: str) -> None:
        """Stop watching ``key`` (no-op if it is not watched)."""
        self._due.pop(key, None)

    def close(self) -> None:
        """Forget every key and disarm the timer."""
        self._due.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._armed_at = math.inf

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_at(when, self._fire)
        self._armed_at = when

    def _fire(self) -> None:
        self._timer = None
        self._armed_at = math.inf
        now = asyncio.get_running_loop().time() + _SLACK_S
        due = [key for key, when in self._due.items() if when <= now]
        for key in due:
            del self._due[key]
        if self._due:
            self._arm(min(self._due.values()))
        for key in due:
            self._on_due(key)
