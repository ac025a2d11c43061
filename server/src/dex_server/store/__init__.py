"""Durable store: a contract per aggregate, the SQLite and PostgreSQL dialects, migrations."""

from __future__ import annotations

from pathlib import Path

from dex_server.store._contract import Store, StoreNotWritableError, StoreUnavailableError, Tx
from dex_server.store._migrations import SchemaBehindError
from dex_server.store._records import ExecRecord, FlowRecord, PendingMessage, StoredValue
from dex_server.store.sqlite import DataFolderInUseError, SqliteStore

__all__ = [
    "DataFolderInUseError",
    "ExecRecord",
    "FlowRecord",
    "PendingMessage",
    "SchemaBehindError",
    "SqliteStore",
    "Store",
    "StoreNotWritableError",
    "StoreUnavailableError",
    "StoredValue",
    "Tx",
    "create_store",
    "prepare_database",
    "is_postgres_url",
]


def is_postgres_url(url: str) -> bool:
    """Whether ``url`` names a PostgreSQL database (``postgresql://`` or ``postgres://``)."""
    return url.startswith(("postgresql://", "postgres://"))


def create_store(
    *,
    database_path: Path | None,
    database_url: str | None,
    fsync: bool,
    pool_size: int,
    verify_only: bool,
    server_id: str,
    sqlite_cache_mib: int,
) -> Store:
    """The store a server configuration names: PostgreSQL for a URL, else the SQLite file."""
    if database_url is not None:
        from dex_server.store.postgres import PostgresStore

        return PostgresStore(
            database_url,
            fsync=fsync,
            pool_size=pool_size,
            verify_only=verify_only,
            server_id=server_id,
        )
    if database_path is None:
        raise ValueError("a server needs database_path (SQLite) or database_url (PostgreSQL)")
    return SqliteStore(
        database_path,
        fsync=fsync,
        verify_only=verify_only,
        server_id=server_id,
        cache_mib=sqlite_cache_mib,
    )


def prepare_database(
    *, database_url: str | None, verify_only: bool, store: Store | None = None
) -> None:
    """Check the database before serving: usable, and migrated (or migrate it).

    PostgreSQL: reachable. SQLite (``store``, its folder lock held): opened and written
    once (see :meth:`SqliteStore.check_writable`). Blocking; run it off the event loop.

    Raises:
        StoreUnavailableError: the database cannot be reached.
        StoreNotWritableError: the SQLite store cannot be opened or written.
        SchemaBehindError: ``verify_only`` and the schema lacks migrations.

    """
    if database_url is None:
        if isinstance(store, SqliteStore):
            store.check_writable()
        return
    import psycopg

    from dex_server.store.postgres import migrate, redact

    try:
        migrate(database_url, verify_only=verify_only)
    except psycopg.OperationalError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise StoreUnavailableError(
            f"cannot reach PostgreSQL at {redact(database_url)}: {first}"
        ) from exc
