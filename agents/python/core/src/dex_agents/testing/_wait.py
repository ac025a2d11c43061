"""Polling with a deadline, instead of sleeping and hoping."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, TypeVar, overload

from dex.errors import DexServiceError

if TYPE_CHECKING:
    from dex_agents import AgentInterrupt, AgentSnapshot

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 30.0
_INTERVAL_S = 0.02


@overload
async def wait_until(
    description: str,
    probe: Callable[[], Awaitable[T | None]],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    interval: float = _INTERVAL_S,
) -> T: ...


@overload
async def wait_until(
    description: str,
    probe: Callable[[], T | None],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    interval: float = _INTERVAL_S,
) -> T: ...


async def wait_until(
    description: str,
    probe: Callable[[], object],
    timeout: float = DEFAULT_TIMEOUT_S,
    *,
    interval: float = _INTERVAL_S,
) -> object:
    """Call ``probe`` until it returns a truthy value, and return that value.

    Use it wherever a test waits for something another process does. ``probe`` may be a
    plain function or a coroutine function; returning None, False or another falsy value
    means "not yet".

    Args:
        description: what is awaited, for the timeout message ("the refund approval").
        probe: returns the awaited value when ready.
        timeout: seconds before giving up (default 30).
        interval: seconds between calls (default 0.02).

    Returns:
        The first truthy value ``probe`` returned.

    Raises:
        TimeoutError: ``probe`` stayed falsy for ``timeout`` seconds; the message names
            ``description`` and the last value seen.

    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        result = probe()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        last = result
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"timed out after {timeout}s waiting for {description} (last: {last!r})"
            )
        await asyncio.sleep(interval)


class SnapshotSource(Protocol):
    """Anything with ``get_agent_snapshot``, such as an ``AgentSessionClient``."""

    async def get_agent_snapshot(self, session_id: str) -> AgentSnapshot:
        """Read one session's snapshot."""
        ...


async def wait_for_agent_snapshot(
    sessions: SnapshotSource,
    session_id: str,
    probe: Callable[[AgentSnapshot], T | None],
    *,
    description: str = "an agent snapshot",
    timeout: float = DEFAULT_TIMEOUT_S,
) -> T:
    """Poll a session's snapshot until ``probe(snapshot)`` returns a truthy value.

    Server errors while polling (for example a session whose start has not committed yet)
    count as "not yet"; the last one is named in the timeout message.

    Args:
        sessions: the session client (``AgentSessionClient``).
        session_id: the session (Flow) ID.
        probe: returns the awaited value from a snapshot, or a falsy value.
        description: what is awaited, for the timeout message.
        timeout: seconds before giving up (default 30).

    Returns:
        The first truthy value ``probe`` returned.

    Raises:
        TimeoutError: the probe stayed falsy for ``timeout`` seconds.

    """
    last_error: list[BaseException] = []

    async def poll() -> T | None:
        try:
            snapshot = await sessions.get_agent_snapshot(session_id)
        except DexServiceError as error:
            last_error[:] = [error]
            return None
        return probe(snapshot)

    try:
        return await wait_until(description, poll, timeout)
    except TimeoutError as error:
        if last_error:
            raise TimeoutError(f"{error}; last server error: {last_error[0]!r}") from None
        raise


def settled_approval(snapshot: AgentSnapshot) -> AgentInterrupt | None:
    """Return the first pending approval once every other tool call of the turn is final.

    Use it as a :func:`wait_for_agent_snapshot` probe before killing a Worker "while the
    session waits for approval": a bare pending interrupt can appear while a parallel tool
    Step of the same model response is still running (its record is committed only when
    that Step ends), and killing the Worker then would rerun that tool.
    """
    pending = next(iter(snapshot.pending_interrupts), None)
    if pending is None:
        return None
    waiting = {i.tool_call_id for i in snapshot.pending_interrupts}
    others = [c for c in snapshot.tool_calls if c.tool_call_id not in waiting]
    return pending if all(c.status.is_final for c in others) else None
