"""The dispatcher on its own, with a host whose store reads fail for a while."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from dex._protocol import ErrorInfo, Task
from dex_server.dispatch import Dispatcher, _dispatcher
from dex_server.dispatch._model import Envelope, InFlight


class _FlakyHost:
    """Builds tasks from a store that is away for the first ``failures`` reads."""

    shared = False

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.builds = 0

    def release(self, env: Envelope) -> None:
        raise AssertionError("a single server releases nothing")

    def versions(self) -> dict[str, int]:
        return {}

    def build_task(self, env: Envelope) -> Awaitable[Task | None]:
        async def build() -> Task | None:
            self.builds += 1
            if self.builds <= self.failures:
                raise ConnectionError("the store is away")
            return Task(
                task_id="", kind="execute", flow_type=env.flow_type, flow_id="f", run_id=env.run_id
            )

        return build()

    def attempt_failed(self, inflight: InFlight | Envelope, error: ErrorInfo) -> None:
        raise AssertionError(f"nothing should fail: {error}")


def _env() -> Envelope:
    return Envelope(
        kind="execute",
        flow_type="T",
        run_id="r1",
        execution_id="A-1",
        attempt=1,
        locks=["k"],
        timeout_s=60.0,
        heartbeat_timeout_s=None,
    )


async def _until(predicate: Callable[[], object], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def test_a_task_whose_build_failed_is_built_again_and_queued() -> None:
    host = _FlakyHost(failures=3)
    d = Dispatcher(host)
    env = _env()
    d.offer(env)
    await _until(lambda: env in d.queues.get("T", ()), 10)
    assert host.builds == 4
    assert d.by_exec[("r1", "A-1")] is env and env.locks_held


async def test_a_cancelled_task_stops_being_built_again() -> None:
    host = _FlakyHost(failures=10**9)
    d = Dispatcher(host)
    env = _env()
    d.offer(env)
    await _until(lambda: host.builds >= 2, 10)
    d.cancel("r1", "A-1", "test")
    # the retrying build ends: nothing of the task is left behind
    await _until(lambda: not _dispatcher._background, 10)
    assert not d.queues.get("T") and d.locks == {} and ("r1", "A-1") not in d.by_exec
