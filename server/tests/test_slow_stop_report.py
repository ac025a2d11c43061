"""A server whose graceful stop hangs says where it waits instead of hanging silently."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from dex_server.app import ServerConfig, _report_slow_stop, uvicorn_server
from starlette.applications import Starlette


async def stuck_in_shutdown(gate: asyncio.Event) -> None:
    await gate.wait()


async def test_a_slow_stop_writes_thread_and_task_stacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # stderr is a file opened for appending and read by path: faulthandler writes its dump
    # from its own thread, and reading (and so truncating) a capture while it writes would
    # lose the start of the report
    report = tmp_path / "stderr.txt"
    with report.open("a", encoding="utf-8") as stderr:
        monkeypatch.setattr(sys, "stderr", stderr)
        gate = asyncio.Event()
        task = asyncio.create_task(stuck_in_shutdown(gate))
        handle = _report_slow_stop(0.2)
        try:
            deadline = asyncio.get_running_loop().time() + 10
            err = ""
            while "its tasks" not in err or "most recent call first" not in err:
                assert asyncio.get_running_loop().time() < deadline, err
                await asyncio.sleep(0.05)
                err = report.read_text(encoding="utf-8", errors="replace")
        finally:
            handle.cancel()
            gate.set()
            await task
    assert "still stopping after 0.2 s" in err
    assert "stuck_in_shutdown" in err  # the task, at its await
    assert "Thread" in err  # faulthandler's dump of the threads


async def test_a_finished_stop_reports_nothing(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    ready = asyncio.Event()
    config = ServerConfig(database_path=tmp_path / "unused.sqlite3", port=0)
    server, listeners = uvicorn_server(config, Starlette(), [ready])
    server.report_slow_stop_after_s = 0.2
    serving = asyncio.create_task(server.serve(sockets=listeners.sockets))
    await asyncio.wait_for(ready.wait(), 20)
    server.should_exit = True
    await asyncio.wait_for(serving, 20)
    listeners.close()
    server.stopped()
    assert server._slow_stop is not None and server._slow_stop.cancelled()
    quiet_until = asyncio.get_running_loop().time() + 0.5  # past the report's time
    while asyncio.get_running_loop().time() < quiet_until:
        await asyncio.sleep(0.05)
    assert "still stopping" not in capfd.readouterr().err
