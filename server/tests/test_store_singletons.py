"""SqliteState.singletons: exactly the run's plain Attributes, however large its maps are."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import msgspec
from dex_server.store import StoredValue
from dex_server.store.sqlite import apply_migrations
from dex_server.store.sqlite._repos import SqliteState


def _stored(data: object) -> StoredValue:
    raw = msgspec.json.encode(data)
    return StoredValue(value=msgspec.Raw(raw), blob=None, size=len(raw))


def test_singletons_skip_map_instances_and_keep_every_plain_attribute(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    apply_migrations(conn)
    state = SqliteState(conn)
    # Plain names sort before, between and after big and small maps; another run's rows
    # and names that merely start like a map ("M0", "M.x") must be handled too.
    plain = ["A", "Log", "Log0", "Log.x", "M", "Mz", "Zed"]
    for name in plain:
        state.write("run-1", name, _stored(name))
    for n in range(500):
        state.write("run-1", f"Log/{n:08}", _stored(n))
    for n in range(3):
        state.write("run-1", f"M/{n}", _stored(n))
    for n in range(40):
        state.write("run-1", f"Z/{n:03}", _stored(n))
    state.write("run-2", "Other", _stored("other"))

    found = state.singletons("run-1")

    assert sorted(found) == sorted(plain)
    assert all(msgspec.json.decode(found[name].value or b"") == name for name in plain)
    assert sorted(state.singletons("run-2")) == ["Other"]
    assert state.singletons("run-3") == {}
