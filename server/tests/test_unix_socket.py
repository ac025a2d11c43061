"""``--unix-socket``: the server also listens on a Unix socket, and refuses paths it must not take.

Each test runs ``python -m dex_server`` on a SQLite file of its own. Sockets live in a short
folder under ``/tmp``: a Unix socket's path is limited to 107 bytes, which pytest's own
temporary folders can exceed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from dex_server.app import MAX_UNIX_SOCKET_PATH_BYTES, UnixSocketError, bind_unix_socket

pytestmark = pytest.mark.store_independent


class _Server:
    def __init__(self, data: Path, sock: Path) -> None:
        data.mkdir(parents=True, exist_ok=True)
        self.address_file = data / "server.address"
        self.log = data / "server.log"
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "dex_server",
                    "--database-path",
                    str(data / "dex.sqlite3"),
                    "--port",
                    "0",
                    "--address-file",
                    str(self.address_file),
                    "--unix-socket",
                    str(sock),
                    "--no-fsync",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )

    def wait_listening(self) -> str:
        deadline = time.monotonic() + 30
        while not self.address_file.exists():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        return self.address_file.read_text().strip()

    def wait_exit(self) -> tuple[int, str]:
        code = self.proc.wait(timeout=30)
        return code, self.log.read_text()

    def stop(self) -> bool:
        """SIGTERM; whether the server stopped gracefully (uvicorn re-raises the signal)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        return code in (0, -signal.SIGTERM) and "Traceback" not in self.log.read_text()


def _health_over(sock: Path) -> httpx.Response:
    transport = httpx.HTTPTransport(uds=str(sock))
    with httpx.Client(transport=transport, base_url="http://localhost", timeout=10) as http:
        return http.get("/v1/health")


def test_the_server_answers_on_its_unix_socket_and_removes_it_when_it_stops(
    short_dir: Path,
) -> None:
    sock = short_dir / "dex.sock"
    server = _Server(short_dir / "a", sock)
    try:
        address = server.wait_listening()
        answer = _health_over(sock)
        assert answer.status_code == 200, answer.text
        # TCP keeps serving beside it
        assert httpx.get(f"http://{address}/v1/health", timeout=10).status_code == 200
    finally:
        assert server.stop()
    assert not sock.exists()


def test_a_socket_left_by_a_killed_server_is_taken_over(short_dir: Path) -> None:
    sock = short_dir / "dex.sock"
    first = _Server(short_dir / "a", sock)
    first.wait_listening()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait(timeout=30)
    assert sock.exists()  # nobody removed it, and nobody listens on it any more

    second = _Server(short_dir / "b", sock)
    try:
        second.wait_listening()
        assert _health_over(sock).status_code == 200
    finally:
        assert second.stop()


def test_a_second_server_on_a_socket_in_use_refuses_and_the_first_keeps_it(
    short_dir: Path,
) -> None:
    sock = short_dir / "dex.sock"
    first = _Server(short_dir / "a", sock)
    try:
        first.wait_listening()
        second = _Server(short_dir / "b", sock)
        code, log = second.wait_exit()
        assert code != 0
        assert "another process listens there" in log
        assert str(sock) in log
        assert _health_over(sock).status_code == 200
    finally:
        assert first.stop()


def test_a_path_that_is_not_a_socket_is_refused_and_left_alone(short_dir: Path) -> None:
    path = short_dir / "notes.txt"
    path.write_text("keep me")
    server = _Server(short_dir / "a", path)
    code, log = server.wait_exit()
    assert code != 0
    assert "exists and is not a socket" in log
    assert "Traceback" not in log
    assert path.read_text() == "keep me"


def test_a_path_over_the_limit_is_refused_naming_the_limit(short_dir: Path) -> None:
    deep = short_dir / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "dex.sock"
    assert len(os.fsencode(path)) > MAX_UNIX_SOCKET_PATH_BYTES
    with pytest.raises(UnixSocketError, match="MAX_UNIX_SOCKET_PATH_BYTES=") as info:
        bind_unix_socket(path)
    assert str(len(os.fsencode(path))) in str(info.value)
    assert not path.exists()

    server = _Server(short_dir / "a", path)
    code, log = server.wait_exit()
    assert code != 0
    assert f"MAX_UNIX_SOCKET_PATH_BYTES={MAX_UNIX_SOCKET_PATH_BYTES}" in log


def test_bind_replaces_only_a_socket_nobody_listens_on(short_dir: Path) -> None:
    path = short_dir / "dex.sock"
    listening = bind_unix_socket(path)
    listening.listen()
    try:
        with pytest.raises(UnixSocketError, match="another process listens there"):
            bind_unix_socket(path)
    finally:
        listening.close()
    # closed without removing its file: the next bind takes the path over
    again = bind_unix_socket(path)
    try:
        again.listen()
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.connect(str(path))
        probe.close()
    finally:
        again.close()
