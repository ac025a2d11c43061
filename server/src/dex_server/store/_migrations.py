"""Numbered SQL migrations and the one runner that applies them, for every dialect.

Files are ``migrations/NNNN_name.sql`` (portable SQL) or a pair
``NNNN_name.sqlite.sql`` / ``NNNN_name.postgres.sql`` when the dialects differ; the numbers
form one contiguous sequence shared by all dialects. Each dialect supplies a
:class:`MigrationDb`: how to take the migration lock and run one transaction.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from importlib import resources
from typing import Protocol

_NAME = re.compile(r"(\d{4})_(\w+?)(?:\.(sqlite|postgres))?\.sql")


@dataclass(frozen=True, kw_only=True)
class Migration:
    version: int
    name: str
    sql: str


class SchemaBehindError(RuntimeError):
    """The database schema is older than this server and it may not migrate it."""


class MigrationDb(Protocol):
    """One dialect's connection, as the migration runner needs it."""

    def ensure_version_table(self) -> None: ...
    def begin_locked(self) -> None:
        """Start a transaction holding the migration lock (serialises concurrent runners)."""

    def applied(self) -> set[int]: ...
    def execute_script(self, sql: str) -> None: ...
    def record(self, version: int, name: str, applied_at: float) -> None: ...
    def commit(self) -> None: ...
    def rollback(self) -> None: ...


def load_migrations(dialect: str) -> list[Migration]:
    """Every migration of ``dialect`` shipped with the package, ordered by version."""
    by_version: dict[int, Migration] = {}
    for entry in resources.files("dex_server.store").joinpath("migrations").iterdir():
        m = _NAME.fullmatch(entry.name)
        if m is None or m[3] not in (None, dialect):
            continue
        version = int(m[1])
        if version in by_version:
            raise RuntimeError(f"migration {version} exists twice for {dialect}")
        by_version[version] = Migration(version=version, name=m[2], sql=entry.read_text())
    out = sorted(by_version.values(), key=lambda x: x.version)
    for i, mig in enumerate(out, start=1):
        if mig.version != i:
            raise RuntimeError(f"migration numbers must be contiguous; {mig.version} != {i}")
    return out


def apply_migrations(db: MigrationDb, dialect: str) -> list[int]:
    """Apply every migration newer than the recorded ``schema_version``; return those applied.

    Each migration runs in its own transaction, under the dialect's migration lock, together
    with its version row, so concurrent runners and restarts apply each one exactly once.
    """
    applied: list[int] = []
    db.ensure_version_table()
    for mig in load_migrations(dialect):
        db.begin_locked()
        try:
            if mig.version not in db.applied():
                db.execute_script(mig.sql)
                db.record(mig.version, mig.name, time.time())
                applied.append(mig.version)
            db.commit()
        except BaseException:
            db.rollback()
            raise
    return applied


def verify_schema(db: MigrationDb, dialect: str) -> None:
    """Check, without changing anything, that every migration was applied.

    Raises:
        SchemaBehindError: the version table is missing or lacks a migration, naming the
            versions to apply (run a server with DDL rights once, without the verify-only
            option).

    """
    try:
        done = db.applied()
    except Exception as exc:
        raise SchemaBehindError(
            "the database has no readable schema_version table (it was never migrated); run "
            "a server with a role that may create tables once to migrate it"
        ) from exc
    missing = [m for m in load_migrations(dialect) if m.version not in done]
    if missing:
        names = ", ".join(f"{m.version:04d}_{m.name}" for m in missing)
        have = max(done, default=0)
        raise SchemaBehindError(
            f"the database schema is at version {have} and lacks migrations {names}; run a "
            "server with a role that may alter the schema once to migrate it"
        )


def statements(sql: str) -> list[str]:
    """Split a migration script into statements at each ``;`` outside ``$$`` bodies.

    No ``;`` may appear inside literals; an SQLite trigger's ``BEGIN ... END`` comes out in
    pieces, which its dialect joins again (see ``sqlite3.complete_statement``).
    """
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    out: list[str] = []
    pending = ""
    for piece in "\n".join(lines).split(";"):
        pending += piece
        if pending.count("$$") % 2:  # inside a dollar-quoted function body
            pending += ";"
            continue
        if pending.strip():
            out.append(pending.strip())
        pending = ""
    if pending.strip():
        raise RuntimeError("a migration ends inside a $$ body")
    return out
