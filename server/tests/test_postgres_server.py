"""``dexcli server`` on PostgreSQL: startup checks and the verify-only schema mode."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests._pg import db_url, needs_postgres
from tests.test_cli import dexcli_cmd

__all__ = ["db_url"]  # a fixture, used by name


pytestmark = needs_postgres


def _server(url: str, address_file: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*dexcli_cmd(), "server", "--database-url", url, "--port", "0"]
        + ["--address-file", str(address_file), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_address(proc: subprocess.Popen[str], address_file: Path) -> str:
    deadline = time.monotonic() + 30
    while not address_file.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "server did not start"
        time.sleep(0.05)
    return address_file.read_text().strip()


def test_verify_only_refuses_an_unmigrated_database_then_serves(
    tmp_path: Path, db_url: str
) -> None:
    refused = subprocess.run(
        [*dexcli_cmd(), "server", "--database-url", db_url, "--verify-schema-only"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert refused.returncode == 1
    assert "never migrated" in refused.stderr and refused.stderr.count("\n") == 1
    # a server with DDL rights migrates; then a verify-only server starts on it
    for extra in ((), ("--verify-schema-only", "--pool-size", "2")):
        address_file = tmp_path / f"address{len(extra)}"
        proc = _server(db_url, address_file, *extra)
        try:
            address = _wait_address(proc, address_file)
            with urllib.request.urlopen(f"http://{address}/v1/health", timeout=10) as r:
                assert json.loads(r.read())["store"] == "postgres"
            proc.send_signal(signal.SIGTERM)
            out, _ = proc.communicate(timeout=20)
            assert "store: postgres postgresql://" in out
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()


def test_an_unreachable_database_is_a_one_line_error() -> None:
    proc = subprocess.run(
        [*dexcli_cmd(), "server", "--database-url", "postgresql://nobody@127.0.0.1:1/dex"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 1
    assert "cannot reach PostgreSQL at postgresql://nobody@127.0.0.1:1/dex" in proc.stderr
    assert proc.stderr.count("\n") == 1
