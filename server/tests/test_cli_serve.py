"""``dexcli dev`` and ``dexcli server``: start, answer, stop on signals, refuse bad input."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.test_cli import dexcli_cmd


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*dexcli_cmd(), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_for_file(path: Path, proc: subprocess.Popen[str], timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    while not (path.exists() and path.read_text().strip()):
        if proc.poll() is not None:
            _, err = proc.communicate()
            raise AssertionError(f"dexcli exited with {proc.returncode}: {err}")
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)
    return path.read_text().strip()


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> tuple[str, str]:
    """Send ``sig`` and wait for the exit; a stop that hangs fails with what it printed.

    A server still stopping after ``STOP_REPORT_AFTER_S`` writes its threads' and tasks'
    stacks to stderr, so the failure shows where it waits.
    """
    proc.send_signal(sig)
    try:
        # generous: a stop ends with a checkpoint and fsync, which a disk busy with other
        # processes' writes can hold for seconds
        return proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"the server did not stop within 60 s\n{out}\n{err}") from None


def health(address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*dexcli_cmd(), "--server", address, "health"], capture_output=True, text=True, timeout=30
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_dev_starts_prints_address_and_stops_on_signal(tmp_path: Path, sig: int) -> None:
    address_file = tmp_path / "addr"
    proc = spawn(
        "dev", "--data-dir", str(tmp_path / "data"), "--port", "0",
        "--address-file", str(address_file), "--engine", "zd",
    )  # fmt: skip
    try:
        address = wait_for_file(address_file, proc)
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address)
        assert health(address).returncode == 0
        assert (tmp_path / "data" / "dex.sqlite3").exists()
        out, err = stop(proc, sig)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert f"listening on {address}" in out
    assert f"DEX_SERVER_ADDRESS={address}" in out
    assert "stopped" in out
    assert "Traceback" not in err
    assert not address_file.exists()  # no stale address left behind


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.10", "example.com"])
def test_dev_refuses_non_loopback_host(tmp_path: Path, host: str) -> None:
    proc = subprocess.run(
        [*dexcli_cmd(), "dev", "--data-dir", str(tmp_path), "--host", host],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "loopback" in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "dex.sqlite3").exists()


def test_server_on_sqlite_url(tmp_path: Path) -> None:
    db = tmp_path / "prod" / "dex.sqlite3"
    token_file = tmp_path / "token"
    token_file.write_text("tok\n")
    proc = spawn(
        "server", "--database-url", f"sqlite:///{db}", "--port", "0",
        "--token-file", str(token_file), "--retention", "3d",
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"listening on (\S+)", line)
        assert match, line
        address = match.group(1)
        assert health(address).returncode == 0
        listed = subprocess.run(
            [*dexcli_cmd(), "--server", address, "--token", "tok", "flow", "list"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert listed.returncode == 0, listed.stderr
        assert db.exists()
        stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0


@pytest.fixture
def short_socket(short_dir: Path) -> Path:
    return short_dir / "dex.sock"


def reap(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.kill()
        proc.communicate()


def test_server_also_listens_on_a_unix_socket(tmp_path: Path, short_socket: Path) -> None:
    db = tmp_path / "prod" / "dex.sqlite3"
    proc = spawn("server", "--database-url", f"sqlite:///{db}", "--port", "0",
                 "--unix-socket", str(short_socket))  # fmt: skip
    try:
        assert proc.stdout is not None
        assert "listening on" in proc.stdout.readline()
        line = proc.stdout.readline()
        assert f"unix://{short_socket}" in line, line
        answered = health(f"unix://{short_socket}")
        assert answered.returncode == 0, answered.stderr
        stop(proc)
    finally:
        reap(proc)
    assert proc.returncode == 0
    assert not short_socket.exists()


def test_dev_also_listens_on_a_unix_socket_and_says_so(tmp_path: Path, short_socket: Path) -> None:
    address_file = tmp_path / "addr"
    proc = spawn("dev", "--data-dir", str(tmp_path / "data"), "--port", "0",
                 "--address-file", str(address_file),
                 "--unix-socket", str(short_socket))  # fmt: skip
    try:
        wait_for_file(address_file, proc)
        answered = health(f"unix://{short_socket}")
        assert answered.returncode == 0, answered.stderr
        out, err = stop(proc)
    finally:
        reap(proc)
    assert proc.returncode == 0, err
    assert f"(or, on this machine: unix://{short_socket})" in out
    assert not short_socket.exists()


def test_server_reports_a_unix_socket_path_it_must_not_take(tmp_path: Path) -> None:
    taken = tmp_path / "notes.txt"
    taken.write_text("keep me")
    proc = subprocess.run(
        [*dexcli_cmd(), "server", "--database-url", f"sqlite:///{tmp_path / 'dex.sqlite3'}",
         "--port", "0", "--unix-socket", str(taken)],
        capture_output=True,
        text=True,
        timeout=30,
    )  # fmt: skip
    assert proc.returncode == 1
    assert "exists and is not a socket" in proc.stderr
    assert proc.stderr.count("\n") == 1
    assert taken.read_text() == "keep me"


@pytest.mark.parametrize(
    ("url", "needle"),
    [
        ("mysql://x/y", "expected sqlite"),
        ("sqlite://relative", "expected sqlite"),
    ],
)
def test_server_rejects_other_databases(url: str, needle: str) -> None:
    proc = subprocess.run(
        [*dexcli_cmd(), "server", "--database-url", url],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 2
    assert needle in proc.stderr and proc.stderr.count("\n") == 1


def test_dev_reports_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [*dexcli_cmd(), "dev", "--data-dir", str(tmp_path), "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert proc.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_server_connection_limit_flags(tmp_path: Path) -> None:
    db = tmp_path / "prod" / "dex.sqlite3"
    proc = spawn(
        "server", "--database-url", f"sqlite:///{db}", "--port", "0",
        "--max-header-bytes", "4096", "--max-header-count", "10",
        "--http-head-timeout-s", "0.5", "--http-body-timeout-s", "0.5",
        "--http-keep-alive-s", "0.5", "--max-connections", "50",
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        match = re.search(r"listening on (\S+)", proc.stdout.readline())
        assert match
        host, port = match.group(1).rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as s:
            s.sendall(b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n")
            answer = s.recv(4096)
        assert answer.startswith(b"HTTP/1.1 431 ") and b"max_header_bytes=4096" in answer
        with socket.create_connection((host, int(port)), timeout=10) as s:
            started = time.monotonic()
            assert s.recv(4096) == b""  # idle: closed after the head timeout
            assert time.monotonic() - started < 5
        stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
