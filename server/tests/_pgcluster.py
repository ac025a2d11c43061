"""A private PostgreSQL cluster a test may stop and start (never the shared server).

``PgCluster`` runs ``initdb`` into a fresh temporary directory and ``pg_ctl`` on a free
loopback port, so a test can take the database away (``stop``) and bring it back on the
same port (``start``) while a Dex server keeps running against it. PostgreSQL refuses to
run as root: as root, every command runs as the user ``postgres`` (``runuser``), and the
directory is handed to that user.

``PgCluster.available()`` says whether the binaries exist; tests skip only when they do not.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg

__all__ = ["PgCluster", "pg_bin_dir", "private_cluster"]

_USER = "postgres"


def pg_bin_dir() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl`` (newest version first), if any."""
    env = os.environ.get("DEX_TEST_PG_BIN")
    candidates = [Path(env)] if env else []
    root = Path("/usr/lib/postgresql")
    if root.is_dir():
        versions = sorted(
            (p for p in root.iterdir() if p.name.isdigit()), key=lambda p: -int(p.name)
        )
        candidates += [v / "bin" for v in versions]
    found = shutil.which("initdb")
    if found:
        candidates.append(Path(found).parent)
    for c in candidates:
        if (c / "initdb").exists() and (c / "pg_ctl").exists():
            return c
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PgCluster:
    """One private cluster: ``start``, ``stop`` (clients lose their sessions), ``url``."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.port = _free_port()
        self.base = Path(tempfile.mkdtemp(prefix="dex-pgcluster-"))
        self.data = self.base / "data"
        self.log = self.base / "postgres.log"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            shutil.chown(self.base, user=_USER, group=None)

    @staticmethod
    def available() -> bool:
        return pg_bin_dir() is not None

    def _run(self, *args: str) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_root:
            cmd = ["runuser", "-u", _USER, "--", *cmd]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr.strip()}")

    def init(self) -> None:
        self._run(
            "initdb", "-D", str(self.data), "-U", _USER, "--auth=trust", "-E", "UTF8", "--no-sync"
        )

    def start(self) -> None:
        """Start (again) on the same port; return once it accepts connections."""
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.base}"
            " -c fsync=off -c max_connections=50"
        )
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", opts, "-w", "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the cluster: every client session ends, new connections are refused."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{_USER}@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"'.encode())
        return self.url(name)

    def execute(self, sql: str) -> None:
        """Run one statement as the superuser (e.g. ``ALTER SYSTEM``)."""
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql.encode())

    def destroy(self) -> None:
        with contextlib.suppress(RuntimeError):
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)


@contextlib.contextmanager
def private_cluster() -> Iterator[PgCluster]:
    """An initialised, started private cluster, destroyed at exit."""
    bin_dir = pg_bin_dir()
    if bin_dir is None:
        raise RuntimeError("initdb/pg_ctl not found")
    cluster = PgCluster(bin_dir)
    try:
        cluster.init()
        cluster.start()
        yield cluster
    finally:
        cluster.destroy()
