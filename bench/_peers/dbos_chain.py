"""DBOS: S ``@DBOS.step()`` no-ops in one ``@DBOS.workflow()``, on SQLite or PostgreSQL.

Run by ``bench/peers.py`` in the peers' environment. DBOS is a library: the workflow, its
steps and the system database client all live in this one process, and every step's
result is committed to the system database before the workflow goes on.

SQLite: DBOS leaves the journal mode and ``synchronous`` at SQLite's defaults (rollback
journal, ``FULL``). Every connection here is switched to WAL with ``synchronous=FULL``, the
mode the Dex server uses with fsync on (and the faster of the two durable modes), and the
values are read back and reported. PostgreSQL: a fresh database per run on the server of
``--database-url``; DBOS commits with the server's ``synchronous_commit`` (reported).
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import sqlalchemy as sa
from _common import SYNCHRONOUS, parse_args, report
from dbos import DBOS, DBOSConfig

PRAGMAS: dict[str, str] = {}


@sa.event.listens_for(sa.engine.Engine, "connect")
def _durable_sqlite(dbapi_conn: Any, record: Any) -> None:
    if type(dbapi_conn).__module__.startswith("sqlite3"):
        dbapi_conn.execute("PRAGMA journal_mode=WAL")
        dbapi_conn.execute("PRAGMA synchronous=FULL")
        PRAGMAS["journal"] = dbapi_conn.execute("PRAGMA journal_mode").fetchone()[0]
        level = dbapi_conn.execute("PRAGMA synchronous").fetchone()[0]
        PRAGMAS["synchronous"] = SYNCHRONOUS[level]


MARKS: list[float] = []


@DBOS.step()
def noop() -> None:
    return None


@DBOS.workflow()
def chain(n: int) -> int:
    for _ in range(n):
        noop()
        MARKS.append(time.perf_counter())
    return n


def pg_settings(url: str) -> str:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        fsync = conn.execute(sa.text("SHOW fsync")).scalar()
        commit = conn.execute(sa.text("SHOW synchronous_commit")).scalar()
    engine.dispose()
    return f"postgres-fsync={fsync}-synchronous_commit={commit}"


def main() -> None:
    args = parse_args("DBOS chain")
    name = "dbos_pg" if args.database_url else "dbos_sqlite"
    if args.database_url:
        admin = sa.make_url(args.database_url).set(drivername="postgresql+psycopg")
        db = f"peers_dbos_{uuid.uuid4().hex[:10]}"
        url = admin.set(database=db).render_as_string(hide_password=False)
        engine = sa.create_engine(admin, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{db}"'))
    else:
        url = f"sqlite:///{args.workdir / 'dbos.sqlite3'}"
    config: DBOSConfig = {"name": "peers-bench", "system_database_url": url}
    DBOS(config=config)
    try:
        DBOS.launch()
        for n in (args.warmup, args.steps):
            MARKS.clear()
            started = time.perf_counter()
            handle = DBOS.start_workflow(chain, n)
            if handle.get_result() != n:
                raise SystemExit(f"{name}: the workflow returned a wrong result")
            wall = time.perf_counter() - started
        durability = (
            pg_settings(url)
            if args.database_url
            else f"sqlite-{PRAGMAS.get('journal')}-synchronous={PRAGMAS.get('synchronous')}"
        )
        report(name, list(MARKS), wall, args.steps, durability)
    finally:
        DBOS.destroy()
        if args.database_url:
            with engine.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)'))
            engine.dispose()


if __name__ == "__main__":
    main()
