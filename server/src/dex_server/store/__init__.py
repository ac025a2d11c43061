"""Durable store: a contract per aggregate, the SQLite dialect and numbered migrations."""

from __future__ import annotations

from dex_server.store._contract import Tx
from dex_server.store._records import ExecRecord, FlowRecord, PendingMessage, StoredValue
from dex_server.store.sqlite import SqliteStore

__all__ = ["ExecRecord", "FlowRecord", "PendingMessage", "SqliteStore", "StoredValue", "Tx"]
