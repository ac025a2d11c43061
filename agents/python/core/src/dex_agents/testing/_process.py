"""Child processes in their own process groups, killable at an exact moment."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path


class ChildProcess:
    """A subprocess started in a new session (its own process group), output to a file."""

    def __init__(
        self,
        args: Sequence[str],
        *,
        log_path: Path,
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                list(args),
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    def is_running(self) -> bool:
        return self._popen.poll() is None

    def signal_group(self, signum: int) -> None:
        try:
            os.killpg(self._popen.pid, signum)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        # SIGKILL the whole group, then reap at once so no zombie outlives the call.
        self.signal_group(signal.SIGKILL)
        self._popen.wait()

    async def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self._popen.poll() is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(0.02)
        return self._popen.returncode

    async def stop(self, timeout: float = 10.0) -> None:
        # Graceful first (SIGTERM), then SIGKILL when it does not exit in time.
        if self._popen.poll() is None:
            self.signal_group(signal.SIGTERM)
            if await self.wait(timeout) is None:
                self.kill()
        self.signal_group(signal.SIGKILL)  # stray grandchildren of the group

    def log_tail(self, max_chars: int = 4000) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text[-max_chars:]
