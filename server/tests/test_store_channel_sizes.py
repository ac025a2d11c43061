"""The Channel sizes a task snapshot reads, kept in ``channel_sizes`` by the database.

On SQLite and on PostgreSQL (when reachable): the sizes equal the pending messages after
publishes, takes, single deletes and a run's deletion, also for Channel map instances and
for rows written by plain SQL (a server of before on the same database); and a database
upgraded past migration 0010 counts the messages that were pending before it.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dex_server.store import SqliteStore, Store, Tx
from dex_server.store._migrations import load_migrations
from dex_server.store.postgres import PostgresStore, migrate
from dex_server.store.postgres._store import _PgMigrationDb
from dex_server.store.sqlite._store import _SqliteMigrationDb

from tests._pg import db_url, postgres_reachable, stores

__all__ = ["db_url", "stores"]  # fixtures, used by name

pytestmark = pytest.mark.store_independent  # each test opens the stores it checks itself

CHANNELS = ["jobs", "other"]
MAPS = ["box"]


def _counted(tx: Tx, run_id: str) -> dict[str, int]:
    """The sizes as the pending messages themselves give them."""
    return dict(Counter(m.channel for m in tx.channels.pending(run_id, CHANNELS, MAPS)))


def _check(tx: Tx, run_id: str) -> dict[str, int]:
    """The run's sizes, after checking every read of them against its pending messages."""
    sizes = tx.channels.sizes(run_id)
    assert sizes == _counted(tx, run_id)
    assert tx.state.snapshot(run_id)[1] == sizes
    later: list[Any] = []
    tx.state.snapshot_later(run_id, later.append)
    if later:  # else it arrives with the commit (PostgreSQL) and is checked there
        assert later[0][1] == sizes
    return sizes


async def test_sizes_follow_publish_take_delete_and_run_deletion(stores: list[Store]) -> None:
    for store in stores:
        store.open()
        name = type(store).__name__

        def fill(tx: Tx) -> None:
            for k in range(40):
                tx.channels.publish("run-1", "jobs", f"j{k}", b"1")
            for k in range(3):
                tx.channels.publish("run-1", "box/a", f"a{k}", b"2")
                tx.channels.publish("run-2", "jobs", f"x{k}", b"3")
            tx.channels.publish("run-1", "box/b", "b0", b"4")
            tx.channels.publish("run-1", "other", "o0", b"5")

        await store.run(fill)
        assert await store.read(lambda tx: _check(tx, "run-1")) == {
            "jobs": 40,
            "box/a": 3,
            "box/b": 1,
            "other": 1,
        }, name

        def consume(tx: Tx) -> dict[str, int]:
            ids = tx.channels.pending_ids("run-1", ["jobs", "box/a"], {"jobs": 10})
            taken = tx.channels.take("run-1", [*ids["jobs"], *ids["box/a"], "no-such-id"])
            assert len(taken) == 13
            assert tx.channels.delete("run-1", "other", "o0") == 1
            assert tx.channels.delete("run-1", "other", "o0") is None  # gone: no change
            assert tx.channels.delete("run-1", "jobs", "a0") is None  # another Channel's id
            return _check(tx, "run-1")

        # emptied Channels are left out, as a count of the pending messages leaves them out
        assert await store.run(consume) == {"jobs": 30, "box/b": 1}, name
        assert await store.read(lambda tx: _check(tx, "run-2")) == {"jobs": 3}, name

        def refill(tx: Tx) -> dict[str, int]:
            tx.channels.publish("run-1", "box/a", "a9", b"6")
            return _check(tx, "run-1")

        assert await store.run(refill) == {"jobs": 30, "box/a": 1, "box/b": 1}, name

        def delete_run(tx: Tx) -> None:
            tx.channels.delete_run("run-1")

        await store.run(delete_run)
        assert await store.read(lambda tx: _check(tx, "run-1")) == {}, name
        assert await store.read(lambda tx: _check(tx, "run-2")) == {"jobs": 3}, name
        await store.close()


async def test_a_pg_snapshot_sent_with_the_commit_has_the_sizes_of_the_commit(
    db_url: str,
) -> None:
    if not postgres_reachable():
        pytest.skip("PostgreSQL is not reachable")
    store = PostgresStore(db_url, fsync=False)
    store.open()
    got: list[Any] = []

    def publish_and_snapshot(tx: Tx) -> None:
        for k in range(5):
            tx.channels.publish("run-1", "jobs", f"j{k}", b"1")
        tx.channels.take("run-1", ["j0"])
        tx.state.snapshot_later("run-1", got.append)

    await store.run(publish_and_snapshot)
    assert [snap[1] for snap in got] == [{"jobs": 4}]
    await store.close()


# --------------------------------------------------------------------------- upgrades

_OLD_ROWS = [  # (run_id, channel, message_id) as a server of before wrote them
    *[("run-1", "jobs", f"j{k}") for k in range(7)],
    *[("run-1", "box/a", f"a{k}") for k in range(2)],
    ("run-2", "jobs", "x0"),
]
_INSERT = "INSERT INTO channel_messages (run_id, channel, map_name, message_id, value) VALUES "


def _old_row(run_id: str, channel: str, message_id: str) -> tuple[str, str, str | None, str, bytes]:
    head, sep, _ = channel.partition("/")
    return run_id, channel, head if sep else None, message_id, b"1"


def _sqlite_before_0010(path: Path) -> Callable[[str, tuple[Any, ...]], None]:
    conn = sqlite3.connect(path, isolation_level=None)
    db = _SqliteMigrationDb(conn)
    db.ensure_version_table()
    for m in load_migrations("sqlite")[:9]:
        db.begin_locked()
        db.execute_script(m.sql)
        db.record(m.version, m.name, 0.0)
        db.commit()

    conn.close()

    def execute(sql: str, args: tuple[Any, ...]) -> None:
        c = sqlite3.connect(path, isolation_level=None)
        try:
            c.execute(sql, args)
        finally:
            c.close()

    return execute


def _pg_before_0010(url: str) -> Callable[[str, tuple[Any, ...]], None]:
    with psycopg.connect(url, autocommit=True) as conn:
        db = _PgMigrationDb(conn)
        db.ensure_version_table()
        for m in load_migrations("postgres")[:9]:
            db.begin_locked()
            db.execute_script(m.sql)
            db.record(m.version, m.name, 0.0)
            db.commit()

    def execute(sql: str, args: tuple[Any, ...]) -> None:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(sql.replace("?", "%s").encode(), args)

    return execute


async def test_an_upgraded_database_counts_the_messages_pending_before_it(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cases: list[tuple[Callable[[str, tuple[Any, ...]], None], Callable[[], Store]]] = []
    path = tmp_path / "old.sqlite3"
    cases.append((_sqlite_before_0010(path), lambda: SqliteStore(path, fsync=False)))
    if postgres_reachable():
        url: str = request.getfixturevalue("db_url")
        cases.append((_pg_before_0010(url), lambda: PostgresStore(url, fsync=False)))
    for execute, make in cases:
        for row in _OLD_ROWS:
            execute(_INSERT + "(?,?,?,?,?)", _old_row(*row))
        store = make()
        store.open()  # applies 0010
        name = type(store).__name__
        assert await store.read(lambda tx: _check(tx, "run-1")) == {"jobs": 7, "box/a": 2}, name
        assert await store.read(lambda tx: _check(tx, "run-2")) == {"jobs": 1}, name

        def consume(tx: Tx) -> dict[str, int]:
            tx.channels.take("run-1", ["j0", "j1", "a0", "a1"])
            tx.channels.publish("run-1", "jobs", "j7", b"2")
            return _check(tx, "run-1")

        assert await store.run(consume) == {"jobs": 6}, name
        # a server of before, still writing to the upgraded database, is counted too
        execute(_INSERT + "(?,?,?,?,?)", _old_row("run-2", "box/z", "z0"))
        execute("DELETE FROM channel_messages WHERE run_id=? AND message_id=?", ("run-2", "x0"))
        assert await store.read(lambda tx: _check(tx, "run-2")) == {"box/z": 1}, name
        await store.close()


def test_the_pg_backfill_writes_one_row_per_non_empty_channel(db_url: str) -> None:
    if not postgres_reachable():
        pytest.skip("PostgreSQL is not reachable")
    execute = _pg_before_0010(db_url)
    for row in _OLD_ROWS:
        execute(_INSERT + "(?,?,?,?,?)", _old_row(*row))
    assert migrate(db_url) == [10]
    assert migrate(db_url) == []
    with psycopg.connect(db_url) as conn:
        rows = conn.execute(
            "SELECT run_id, channel, size FROM channel_sizes ORDER BY run_id, channel"
        ).fetchall()
    assert rows == [("run-1", "box/a", 2), ("run-1", "jobs", 7), ("run-2", "jobs", 1)]
