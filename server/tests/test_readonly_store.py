"""A server restarted on a store it cannot write exits at once with one line naming the cause.

The store is made read-only the way that works for the user running the tests: ``chattr +i``
for root (whom file modes do not stop), file modes for anyone else.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_cli import dexcli_cmd
from tests.test_cli_serve import spawn, wait_for_file


@contextlib.contextmanager
def read_only(*paths: Path) -> Iterator[None]:
    if os.geteuid() == 0:
        chattr = shutil.which("chattr")
        if chattr is None:
            pytest.skip("root needs chattr to make a file read-only")
        done: list[Path] = []
        try:
            for p in paths:
                if subprocess.run([chattr, "+i", str(p)], capture_output=True).returncode != 0:
                    pytest.skip(f"chattr +i is not supported on {p}")
                done.append(p)
            yield
        finally:
            for p in done:
                subprocess.run([chattr, "-i", str(p)], check=True)
    else:
        modes = {p: p.stat().st_mode for p in paths}
        try:
            for p in paths:
                p.chmod(stat.S_IMODE(p.stat().st_mode) & ~0o222)
            yield
        finally:
            for p, mode in modes.items():
                p.chmod(stat.S_IMODE(mode))


def first_run(data: Path, tmp_path: Path) -> None:
    """Create the store with a server that then stops cleanly."""
    address_file = tmp_path / "addr"
    proc = spawn("dev", "--data-dir", str(data), "--port", "0", "--address-file", str(address_file))
    try:
        wait_for_file(address_file, proc)
        proc.terminate()
        proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0
    assert (data / "dex.sqlite3").exists()


def assert_one_line(result: subprocess.CompletedProcess[str], cause: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines
    assert cause in lines[0], lines


def test_restarting_on_a_read_only_database_file(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first_run(data, tmp_path)
    db = data / "dex.sqlite3"
    with read_only(db):
        dev = subprocess.run(
            [*dexcli_cmd(), "dev", "--data-dir", str(data), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert_one_line(dev, "readonly database")
        assert str(db) in dev.stderr
        server = subprocess.run(
            [*dexcli_cmd(), "server", "--database-url", f"sqlite:///{db}", "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert_one_line(server, "readonly database")
        internal = subprocess.run(
            [sys.executable, "-m", "dex_server", "--database-path", str(db), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert_one_line(internal, "readonly database")


def test_restarting_in_a_read_only_data_folder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first_run(data, tmp_path)
    with read_only(data / "dex.sqlite3", data):
        dev = subprocess.run(
            [*dexcli_cmd(), "dev", "--data-dir", str(data), "--port", "0"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert_one_line(dev, str(data))
