"""What the server tests share: PostgreSQL test databases and polling with a deadline."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import psycopg
import pytest
from dex_server.store import SqliteStore, Store
from dex_server.store.postgres import PostgresStore
from dex_server.testing import create_test_database, drop_test_database


@cache
def postgres_reachable() -> bool:
    """Whether a test database can be made on the PostgreSQL the tests use (asked once)."""
    try:
        drop_test_database(create_test_database())
    except psycopg.OperationalError:
        return False
    return True


needs_postgres = pytest.mark.skipif(not postgres_reachable(), reason="PostgreSQL is not reachable")


@pytest.fixture
def db_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    url = create_test_database()
    try:
        yield url
    finally:
        drop_test_database(url)


@pytest.fixture
def stores(tmp_path: Path, request: pytest.FixtureRequest) -> list[Store]:
    """An SQLite store and, when PostgreSQL is reachable, one on a fresh database."""
    out: list[Store] = [SqliteStore(tmp_path / "db", fsync=False)]
    if postgres_reachable():
        out.append(PostgresStore(request.getfixturevalue("db_url"), fsync=False))
    return out


async def _check(predicate: Callable[[], Any]) -> object:
    got = predicate()
    return await got if asyncio.iscoroutine(got) else got


async def until(predicate: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Poll ``predicate`` (sync or async) until it is true, for at most ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not await _check(predicate):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def never(predicate: Callable[[], Any], seconds: float, what: str) -> None:
    """Check for ``seconds`` that ``predicate`` (sync or async) stays false."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert not await _check(predicate), what
        await asyncio.sleep(0.05)
