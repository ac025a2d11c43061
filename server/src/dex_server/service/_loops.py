"""Keeping the server's background loops alive through store outages and their own bugs.

Every periodic loop (timers, leases, retention, the cluster poll, the store probe) catches
the failure of one round, reports it to an :class:`Outage` (one log line when the failures
start, one when they end, never one per round) and tries again after a growing pause.
:func:`supervise` runs each loop and starts it again if it ever ends or raises anyway.
:class:`StoreHealth` is what ``/v1/health`` reports.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from dex_server.store import StoreUnavailableError

log = logging.getLogger("dex_server")

_FIRST_BACKOFF_S = 0.1
_MAX_BACKOFF_S = 5.0
# a loop that ran this long before it ended was healthy: restart it without waiting
_HEALTHY_RUN_S = 30.0
# the probe's answer is stale after this long: a store that does not answer is degraded
PROBE_STALE_S = 10.0


def describe(exc: BaseException) -> str:
    """``exc`` as one short line for logs and health reasons."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class Outage:
    """Failures of one job in a row: logged when they start and when they end, with backoff."""

    def __init__(self, what: str, logger: logging.Logger = log) -> None:
        self.what = what
        self.log = logger
        self.failures = 0
        self._since = 0.0

    def failed(self, exc: BaseException) -> float:
        """Record one failure; return how long to wait before the next try."""
        if self.failures == 0:
            self._since = time.monotonic()
            # a store outage is expected and explained by its message; anything else is a bug
            trace = None if isinstance(exc, StoreUnavailableError) else exc
            self.log.warning(
                "%s failed; retrying until it works: %s", self.what, describe(exc), exc_info=trace
            )
        self.failures += 1
        return self.backoff()

    def backoff(self) -> float:
        n = max(self.failures - 1, 0)
        return min(_FIRST_BACKOFF_S * 2.0 ** min(n, 16), _MAX_BACKOFF_S)

    def ok(self) -> None:
        if self.failures:
            self.log.warning(
                "%s works again after %d failures in %.1f s",
                self.what,
                self.failures,
                time.monotonic() - self._since,
            )
            self.failures = 0


class StoreHealth:
    """Whether the store answers, as the probe and the loops last saw it."""

    def __init__(self) -> None:
        self._reason: str | None = None
        self._last_ok = time.monotonic()

    def ok(self) -> None:
        self._reason = None
        self._last_ok = time.monotonic()

    def failed(self, exc: BaseException) -> None:
        self._reason = f"the store cannot be reached: {describe(exc)}"

    def note(self, exc: BaseException) -> None:
        """A loop's failure: only an unreachable store makes the server degraded."""
        if isinstance(exc, StoreUnavailableError):
            self.failed(exc)

    def reason(self) -> str | None:
        """Why the server is degraded, or None while the store answers."""
        if self._reason is not None:
            return self._reason
        silent = time.monotonic() - self._last_ok
        if silent > PROBE_STALE_S:
            return f"the store has not answered for {silent:.0f} s"
        return None


async def supervise(name: str, body: Callable[[], Awaitable[None]]) -> None:
    """Run the loop ``body`` until cancelled, starting it again whenever it ends or raises.

    Each restart is logged; quick successive restarts wait longer and longer (up to 5 s).
    """
    restarts = 0
    while True:
        started = time.monotonic()
        try:
            await body()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("background loop %s stopped with an error; restarting it", name, exc_info=exc)
        else:
            log.error("background loop %s ended; restarting it", name)
        restarts = 0 if time.monotonic() - started > _HEALTHY_RUN_S else restarts + 1
        await asyncio.sleep(min(_FIRST_BACKOFF_S * 2.0 ** min(restarts, 16), _MAX_BACKOFF_S))
