"""SqliteState.singletons and snapshot: exactly the run's plain Attributes, whatever its maps."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import cast

import msgspec
from dex._protocol import StepOptionsSpec
from dex_server.store import ExecRecord, FlowRecord, StoredValue
from dex_server.store.sqlite import apply_migrations
from dex_server.store.sqlite._repos import (
    SqliteChannels,
    SqliteExecutions,
    SqliteFlows,
    SqliteHistory,
    SqliteState,
)


def _stored(data: object) -> StoredValue:
    raw = msgspec.json.encode(data)
    return StoredValue(value=msgspec.Raw(raw), blob=None, size=len(raw))


def _state(tmp_path: Path) -> tuple[sqlite3.Connection, SqliteState, SqliteChannels]:
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    apply_migrations(conn)
    return conn, SqliteState(conn), SqliteChannels(conn)


def test_singletons_skip_map_instances_and_keep_every_plain_attribute(tmp_path: Path) -> None:
    _, state, _ = _state(tmp_path)
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


def _counted(conn: sqlite3.Connection) -> list[str]:
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    return statements


def _plain_values(snapshot: dict[str, StoredValue]) -> dict[str, object]:
    return {name: msgspec.json.decode(v.value or b"") for name, v in snapshot.items()}


def test_a_snapshot_takes_one_statement_once_the_maps_of_its_flow_type_are_known(
    tmp_path: Path,
) -> None:
    conn, state, channels = _state(tmp_path)
    plain = ["A", "Log", "Log0", "Log.x", "Log-x", "M", "Mz", "It's", "Zed"]
    for name in plain:
        state.write("run-1", name, _stored(name))
    for n in range(40):
        state.write("run-1", f"Log/{n:08}", _stored(n))
    for n in range(3):
        state.write("run-1", f"M/{n}", _stored(n))
    channels.publish("run-1", "Inbox", "m-1", b'"hello"')
    channels.publish("run-1", "Inbox", "m-2", b'"again"')
    state.write("run-2", "Other", _stored("other"))
    expected_sizes = {"Inbox": 2}  # pending messages per Channel

    statements = _counted(conn)
    first = state.snapshot("run-1", "Agent")  # walks the names and learns the maps
    walked = len(statements)
    second = state.snapshot("run-1", "Agent")

    assert walked >= 3
    assert len(statements) - walked == 1, statements[walked:]
    for values, sizes in (first, second):
        assert _plain_values(values) == {name: name for name in plain}
        assert sizes == expected_sizes
    # another run of the type reads in one statement from the start
    other = state.snapshot("run-2", "Agent")
    assert _plain_values(other[0]) == {"Other": "other"} and other[1] == {}
    assert len(statements) - walked == 2
    # without a type nothing is learnt: the walk and the sizes as before
    assert state.snapshot("run-1") == first


def test_a_map_not_seen_before_is_read_past_and_learnt_never_hiding_a_singleton(
    tmp_path: Path,
) -> None:
    conn, state, _ = _state(tmp_path)
    state.write("run-1", "State", _stored(1))
    for n in range(20):
        state.write("run-1", f"Log/{n:03}", _stored(n))
    assert _plain_values(state.snapshot("run-1", "T")[0]) == {"State": 1}  # learns Log

    # run-2 holds a map run-1 never showed: a few instances, then many more
    state.write("run-2", "Before", _stored(0))
    state.write("run-2", "Tasks0", _stored(0))
    for n in range(3):
        state.write("run-2", f"Tasks/{n}", _stored(n))
    statements = _counted(conn)
    assert _plain_values(state.snapshot("run-2", "T")[0]) == {"Before": 0, "Tasks0": 0}
    assert len(statements) == 1  # read past in the one statement, and learnt
    for n in range(3, 60):
        state.write("run-3", f"Jobs/{n}", _stored(n))
    state.write("run-3", "Zz", _stored(2))
    statements.clear()
    assert _plain_values(state.snapshot("run-3", "T")[0]) == {"Zz": 2}
    assert len(statements) > 1  # too many unknown instances: the walk took over
    statements.clear()
    assert _plain_values(state.snapshot("run-3", "T")[0]) == {"Zz": 2}
    assert len(statements) == 1  # Jobs was learnt on the way


def test_snapshots_of_random_names_hold_exactly_the_singletons(tmp_path: Path) -> None:
    conn, state, _ = _state(tmp_path)
    rng = random.Random(20261206)
    alphabet = "AB./0'-z"
    for trial in range(120):
        run_id = f"run-{trial}"
        names: set[str] = set()
        for _ in range(rng.randint(0, 40)):
            head = "".join(rng.choice(alphabet.replace("/", "")) for _ in range(rng.randint(1, 3)))
            if rng.random() < 0.6:
                names.add(f"{head}/{rng.randint(0, 30)}")
            else:
                names.add(head)
        for name in names:
            state.write(run_id, name, _stored(name))
        expected = {n: n for n in names if "/" not in n}
        flow_type = f"T{trial % 3}"  # types share what they learnt across runs
        for _ in range(2):
            values, sizes = state.snapshot(run_id, flow_type)
            assert _plain_values(values) == expected, (trial, sorted(names))
            assert sizes == {}


class _Recording:
    """A connection that records the type of every parameter a statement binds."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.kinds: list[tuple[str, type]] = []

    def execute(self, sql: str, params: Sequence[object] = ()) -> sqlite3.Cursor:
        self.kinds += [(sql, type(p)) for p in params]
        return self.conn.execute(sql, params)

    def executemany(self, sql: str, rows: Iterable[Sequence[object]]) -> sqlite3.Cursor:
        rows = list(rows)
        for row in rows:
            self.kinds += [(sql, type(p)) for p in row]
        return self.conn.executemany(sql, rows)


def test_a_steps_writes_bind_no_bytes_and_no_none_where_they_can_be_avoided(
    tmp_path: Path,
) -> None:
    # sqlite3 looks up an adapter for every bytes and None parameter (two failed attribute
    # lookups each), for none of the types it binds as they are
    conn, _, _ = _state(tmp_path)
    recording = _Recording(conn)
    db = cast(sqlite3.Connection, recording)
    flow = FlowRecord(run_id="r1", flow_id="f1", flow_type="T", started_at=1.0)
    SqliteFlows(conn).insert(flow)
    flow.version += 1
    SqliteFlows(db).update(flow)
    SqliteHistory(db).append("r1", 1, 2.0, "StepExecuteCompleted", b'{"x":1}')
    SqliteState(db).write_many("r1", [("A", _stored(1)), ("M/k", _stored(2))], {})
    SqliteChannels(db).publish("r1", "C", "m1", b'"v"')
    waiting = ExecRecord(
        run_id="r1",
        execution_id="S-1",
        step_type="S",
        from_execution_id="__start__",
        phase="waiting",
        options=StepOptionsSpec(),
        first_attempt_at=1.0,
    )
    SqliteExecutions(db, "me").put(waiting)
    assert recording.kinds
    assert [k for k in recording.kinds if k[1] is bytes] == []
    assert [k for k in recording.kinds if k[1] is type(None)] == []
    stored = SqliteExecutions(conn, "me").get("r1", "S-1")
    assert stored is not None and stored.phase == "waiting" and stored.claimed_by is None
    assert conn.execute("SELECT ready_at, claimed_by FROM executions").fetchone() == (None, None)
    got = SqliteFlows(conn).get("r1")
    assert got is not None and got.version == flow.version
    history = conn.execute("SELECT payload FROM history WHERE run_id='r1'").fetchone()
    assert history == (b'{"x":1}',)  # read back as bytes
    values = SqliteState(conn).of_names("r1", ["A", "M/k"])
    assert {n: msgspec.json.decode(v.value or b"") for n, v in values.items()} == {
        "A": 1,
        "M/k": 2,
    }
    # a value kept as a blob, next to plain ones in one write
    blob = StoredValue(blob="h" * 64, size=5000)
    SqliteState(conn).write_many("r1", [("B", blob), ("M/j", _stored(3)), ("C", _stored(4))])
    mixed = SqliteState(conn).of_names("r1", ["B", "M/j", "C"])
    assert mixed["B"] == blob and mixed["M/j"] == _stored(3) and mixed["C"] == _stored(4)
    rows = conn.execute("SELECT name, map_name FROM attributes ORDER BY name").fetchall()
    assert rows == [("A", None), ("B", None), ("C", None), ("M/j", "M"), ("M/k", "M")]
