"""PostgreSQL dialect of the store (psycopg 3; several servers may share one database)."""

from __future__ import annotations

from dex_server.store.postgres._store import PostgresStore, migrate, redact

__all__ = ["PostgresStore", "migrate", "redact"]
