"""SQLite dialect of the store."""

from __future__ import annotations

from dex_server.store.sqlite._store import DataFolderInUseError, SqliteStore, apply_migrations

__all__ = ["DataFolderInUseError", "SqliteStore", "apply_migrations"]
