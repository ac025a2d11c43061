"""The "Build a durable agent" guides' code, run as a reader would run it.

The test extracts the files the guide marks with ``<!-- file: NAME -->``, writes them to
a fresh folder, starts a real ``dexcli dev`` server, runs ``worker.py`` as a child process
and ``client.py`` to its end, and checks what happened: both turns answered, the approved
refund ran once, the rejected one never ran, the session was stopped, and the Worker
stopped gracefully on SIGTERM.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from dex_agents.testing import EXECUTE_COMPLETED_EVENT, find_dexcli, read_step_history

GUIDES = Path(__file__).resolve().parents[4] / "docs" / "agents"
DOC_ADDRESS = "127.0.0.1:8801"
FILE_BLOCK = re.compile(r"<!-- file: (?P<name>[\w.]+) -->\n```python\n(?P<code>.*?)\n```", re.S)


def extract_files(page: Path) -> dict[str, str]:
    """Map file name to code for every ``<!-- file: NAME -->`` fenced block of ``page``."""
    files: dict[str, str] = {}
    for match in FILE_BLOCK.finditer(page.read_text()):
        assert match["name"] not in files, f"{match['name']} appears twice in {page.name}"
        files[match["name"]] = match["code"] + "\n"
    return files


class Child:
    """A child process in its own process group, its output in a log file."""

    def __init__(self, args: list[str], log_path: Path, cwd: Path | None = None) -> None:
        self.log_path = log_path
        with log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                args, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    def log(self) -> str:
        """The child's output so far."""
        return _read(self.log_path)

    async def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for the child to exit; its code, or None."""
        deadline = time.monotonic() + timeout
        while self.popen.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.popen.poll()

    async def stop(self) -> None:
        """SIGTERM the child's group, then SIGKILL it if it is still there after 10 s."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            if await self.wait(10) is None:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


async def wait_for(description: str, probe: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll ``probe`` until it holds; fail naming ``description`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {description}")
        await asyncio.sleep(0.05)


async def check_guide(page_name: str, tmp_path: Path) -> None:
    """Run the files of ``docs/agents/<page_name>`` against a fresh server and check them."""
    files = extract_files(GUIDES / page_name)
    assert set(files) == {"agent.py", "worker.py", "client.py"}
    address_file = tmp_path / "address"
    server = Child(
        [str(find_dexcli()), "dev", "--port", "0", "--data-dir", str(tmp_path / ".dex")]
        + ["--address-file", str(address_file)],
        tmp_path / "server.log",
    )
    worker: Child | None = None
    try:
        await wait_for("the server's address", lambda: ":" in _read(address_file))
        address = _read(address_file)
        for name, code in files.items():
            if name != "agent.py":
                assert DOC_ADDRESS in code, f"{name} names no server address"
            (tmp_path / name).write_text(code.replace(DOC_ADDRESS, address))

        # The client needs no Worker to start a session: both start at once, as a reader's
        # terminals would, and the session's Steps wait for the Worker to register.
        worker = Child([sys.executable, "worker.py"], tmp_path / "worker.log", cwd=tmp_path)
        client = await asyncio.create_subprocess_exec(
            sys.executable,
            "client.py",
            cwd=tmp_path,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            output_bytes, _ = await asyncio.wait_for(client.communicate(), timeout=180)
        except TimeoutError:
            client.kill()
            await client.wait()
            raise AssertionError(f"client.py did not finish:\n{worker.log()}") from None
        output = output_bytes.decode()
        assert client.returncode == 0, f"{output}\nWorker:\n{worker.log()}"
        assert "serving SupportDesk on" in worker.log()
        assert "[issue_refund: succeeded]" in output
        assert "[issue_refund: rejected]" in output
        assert "Done: refunded $249 on order 1042." in output
        assert "session stopped" in output
        # The recorded conversation, read after the last turn committed, ends with its answer.
        recorded = output.split("conversation:")[1]
        assert "assistant I could not issue that refund: a person declined it." in recorded

        # The approved refund ran once; the rejected one never ran.
        refund_lines = (tmp_path / "refunds.jsonl").read_text().splitlines()
        refunds = [json.loads(line) for line in refund_lines]
        assert [(r["order_id"], r["amount"]) for r in refunds] == [(1042, 249)]
        notes = json.loads((tmp_path / "notes.json").read_text())
        assert sorted(note["order_id"] for note in notes.values()) == [1042, 1043]

        session_id = re.search(r"session (\S+)", output)
        assert session_id is not None, output
        history = await read_step_history(address, session_id[1])
        ran = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert ran.count("CallSingleAttemptTool") == 1  # the approved refund only
        assert ran.count("AwaitToolApproval") == 2

        os.killpg(worker.popen.pid, signal.SIGTERM)
        assert await worker.wait(30) == 0, worker.log()
    finally:
        if worker is not None:
            await worker.stop()
        await server.stop()


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""
