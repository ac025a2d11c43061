"""Workers that talk: a worker script with no logging set up shows what its Worker does.

A real server, and the Worker as a child process running a user-shaped script
(``tests/support/talking_worker.py``) that configures neither logging nor options: the
address comes from env ``DEX_SERVER_ADDRESS`` and the token from env ``DEX_TOKEN``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dex import (
    AsyncClient,
    AsyncWorker,
    ClientOptions,
    FlowStatus,
    PullRegistrationError,
    PullWorkerOptions,
    Registry,
    WorkerOptions,
)
from dex_server.testing import TcpProxy, running_server

from tests.support.polling import wait_until
from tests.support.talking_worker import TalkingFlow

SCRIPT = Path(__file__).parent / "support" / "talking_worker.py"
SDK_ROOT = Path(__file__).parent.parent


class _Script:
    def __init__(self, directory: Path, env: dict[str, str]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.log = directory / "worker.log"
        child_env = {k: v for k, v in os.environ.items() if not k.startswith("DEX_")}
        child_env.update(env, PYTHONPATH=str(SDK_ROOT))
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, str(SCRIPT)], stdout=out, stderr=subprocess.STDOUT, env=child_env
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, needle: str, timeout: float = 30.0) -> str:
        wait_until(f"the Worker logs {needle!r}", lambda: needle in self.text(), timeout)
        return self.text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(10)


@pytest.fixture
def scripts() -> Iterator[list[_Script]]:
    started: list[_Script] = []
    yield started
    for script in started:
        script.stop()


async def test_a_worker_script_logs_start_failed_attempts_and_drain(
    tmp_path: Path, scripts: list[_Script]
) -> None:
    async with running_server(tmp_path / "server") as server:
        script = _Script(tmp_path, {"DEX_SERVER_ADDRESS": server.address})
        scripts.append(script)
        script.wait_for("serving Flow types [TalkingFlow]")
        assert f"connected to {server.address}" in script.text()
        assert "100 task slots" in script.text()

        flow = TalkingFlow()
        client = AsyncClient(Registry([flow]), None, ClientOptions(server_address=server.address))
        try:
            await client.start_flow(flow, "talks-1", 1)
            result = await client.wait_for_flow("talks-1", timeout=60)
        finally:
            await client.close()
        assert result.status is FlowStatus.FAILED

        text = script.wait_for("will not retry")
        first = "Step Broken.execute of Flow TalkingFlow talks-1 (attempt 1 of 2) failed: TypeError"
        assert first in text
        assert "will retry" in text.split(first, 1)[1].splitlines()[0]
        assert "(attempt 2 of 2) failed: TypeError" in text
        assert "attempt 2 was the last of maximum_attempts=2" in text
        # The traceback names the user's line.
        assert "Traceback (most recent call last)" in text
        assert 'input + "one"' in text

        script.process.send_signal(signal.SIGTERM)
        script.process.wait(30)
        text = script.text()
        assert "stopping: no task running" in text
        assert f"stopped and disconnected from {server.address}" in text


async def test_the_token_comes_from_dex_token_and_a_refusal_hints_at_it(
    tmp_path: Path, scripts: list[_Script]
) -> None:
    async with running_server(tmp_path / "server", token="s3cret") as server:
        refused = _Script(tmp_path / "refused", {"DEX_SERVER_ADDRESS": server.address})
        scripts.append(refused)
        text = refused.wait_for("missing or wrong bearer token")
        assert "WorkerOptions(credential=...)" in text
        assert "set env DEX_TOKEN" in text

        accepted = _Script(
            tmp_path / "accepted", {"DEX_SERVER_ADDRESS": server.address, "DEX_TOKEN": "s3cret"}
        )
        scripts.append(accepted)
        accepted.wait_for("serving Flow types [TalkingFlow]")


def test_env_defaults_fill_only_what_is_left_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DEX_SERVER_ADDRESS", "example.test:9000")
    monkeypatch.setenv("DEX_TOKEN", "from-env")
    assert ClientOptions().server_address == "example.test:9000"
    assert ClientOptions().credential == "from-env"
    assert WorkerOptions().server_address == "example.test:9000"
    assert WorkerOptions().credential == "from-env"
    explicit = ClientOptions(server_address="localhost:8801", credential="mine")
    assert (explicit.server_address, explicit.credential) == ("localhost:8801", "mine")
    worker = WorkerOptions(server_address="localhost:8801", credential="mine")
    assert (worker.server_address, worker.credential) == ("localhost:8801", "mine")
    monkeypatch.delenv("DEX_SERVER_ADDRESS")
    monkeypatch.delenv("DEX_TOKEN")
    assert ClientOptions().server_address == "localhost:8801"
    assert ClientOptions().credential is None


async def test_a_lost_connection_and_the_reconnect_are_logged(
    tmp_path: Path, scripts: list[_Script]
) -> None:
    async with running_server(tmp_path / "server") as server:
        host, port = server.address.rsplit(":", 1)
        proxy = TcpProxy((host, int(port)))
        try:
            through = f"127.0.0.1:{proxy.port}"
            script = _Script(tmp_path, {"DEX_SERVER_ADDRESS": through})
            scripts.append(script)
            script.wait_for(f"connected to {through}")
            proxy.cut()
            script.wait_for("connection to the Dex server closed")
            proxy.restore()
            text = script.wait_for(f"reconnected to {through}")
            assert "serving Flow types [TalkingFlow]" in text.split("reconnected to", 1)[1]
        finally:
            proxy.close()


async def test_a_worker_stopped_by_a_refused_token_raises_with_the_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DEX_TOKEN", raising=False)
    async with running_server(tmp_path / "server", token="s3cret") as server:
        options = WorkerOptions(
            server_address=server.address,
            pull=PullWorkerOptions(stop_on_permanent_stream_rejection=True),
        )
        worker = AsyncWorker(Registry([TalkingFlow()]), None, options)
        with pytest.raises(PullRegistrationError) as caught:
            await asyncio.wait_for(worker.start(), timeout=30)
        assert "missing or wrong bearer token" in str(caught.value)
        assert "WorkerOptions(credential=...)" in str(caught.value)
        assert "DEX_TOKEN" in str(caught.value)
