"""The supervisor of the background loops, and outage logging, on their own."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
from dex_server.app import ServerConfig
from dex_server.service import Runtime
from dex_server.service._loops import Outage, StoreHealth, supervise
from dex_server.store import StoreUnavailableError


async def test_a_loop_that_raises_or_returns_is_started_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs: list[int] = []
    third = asyncio.Event()

    async def body() -> None:
        runs.append(len(runs))
        if len(runs) == 1:
            raise RuntimeError("a bug in the loop")
        if len(runs) == 2:
            return  # ended without being asked to
        third.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(supervise("demo", body))
    try:
        await asyncio.wait_for(third.wait(), 10)
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert runs == [0, 1, 2]
    messages = [r.getMessage() for r in caplog.records]
    assert "background loop demo stopped with an error; restarting it" in messages
    assert "background loop demo ended; restarting it" in messages


def test_an_outage_is_logged_when_it_starts_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    outage = Outage("the demo job")
    delays = [outage.failed(StoreUnavailableError("db down")) for _ in range(10)]
    outage.ok()
    outage.ok()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "the demo job failed; retrying until it works: StoreUnavailableError: db down",
        lines[1],
    ]
    assert lines[1].startswith("the demo job works again after 10 failures")
    assert delays == sorted(delays) and delays[0] == 0.1 and delays[-1] == 5.0


def test_health_is_degraded_only_for_an_unreachable_store() -> None:
    health = StoreHealth()
    assert health.reason() is None
    health.note(ValueError("a bug, not an outage"))
    assert health.reason() is None
    health.note(StoreUnavailableError("db down"))
    assert health.reason() == "the store cannot be reached: StoreUnavailableError: db down"
    health.ok()
    assert health.reason() is None


async def test_a_stop_that_meets_a_finished_wait_still_ends_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python 3.11's asyncio.wait_for returns the result when the cancel arrives in the
    # same loop pass as the awaited answer: the loop would go on, and the server's stop,
    # which awaits every loop, would hang.
    runtime = Runtime(ServerConfig(database_path=tmp_path / "db"))
    answer: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    asked = asyncio.Event()

    def run(job: object) -> asyncio.Future[None]:
        asked.set()
        return answer

    monkeypatch.setattr(runtime.store, "run", run)
    loop_task = asyncio.create_task(runtime._probe_loop())
    await asyncio.wait_for(asked.wait(), 10)
    answer.set_result(None)  # the probe answers...
    loop_task.cancel()  # ...and the stop cancels the loop, in the same pass
    with pytest.raises(asyncio.CancelledError):
        async with asyncio.timeout(10):
            await loop_task
