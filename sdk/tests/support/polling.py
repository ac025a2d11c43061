"""Polling with a deadline, instead of sleeping and hoping."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

_INTERVAL_S = 0.02


def wait_until(
    description: str,
    probe: Callable[[], T | None],
    timeout: float = 10.0,
    *,
    interval: float = _INTERVAL_S,
) -> T:
    """Call ``probe`` until it returns a truthy value, and return that value.

    A probe that raises is treated as "not yet"; its last exception is chained to the
    ``TimeoutError`` raised when ``timeout`` seconds pass, whose message names
    ``description``.
    """
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = probe()
        except Exception as exc:  # a probe may race with the thing it observes
            last_exc = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting until {description}") from (
                last_exc
            )
        time.sleep(interval)


async def async_wait_until(
    description: str,
    probe: Callable[[], Awaitable[T | None]],
    timeout: float = 10.0,
    *,
    interval: float = _INTERVAL_S,
) -> T:
    """Async twin of ``wait_until`` for probes that must be awaited (client calls)."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            value = await probe()
        except Exception as exc:
            last_exc = exc
        else:
            if value:
                return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting until {description}") from (
                last_exc
            )
        await asyncio.sleep(interval)
