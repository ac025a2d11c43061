from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec
from dex._protocol import FlowSpec

from dex_server.store._contract import Snapshot
from dex_server.store._records import (
    ExecRecord,
    FlowRecord,
    PendingMessage,
    StoredValue,
    claim,
    exec_decoder,
    flow_decoder,
    map_of,
    record_encoder,
    with_claim,
)

log = logging.getLogger("dex_server.store")

_spec_decoder = msgspec.json.Decoder(FlowSpec)

_SINGLETONS_SKIP_AFTER = 16
_EXEC_GET = "SELECT data, claimed_by, claim_epoch FROM executions WHERE run_id=? AND execution_id=?"
_FLOW_WITH_EXEC = (
    "SELECT f.data, e.data, e.claimed_by, e.claim_epoch FROM flows f LEFT JOIN executions e"
    " ON e.run_id=f.run_id AND e.execution_id=? WHERE f.run_id=?"
)
# kept by triggers on channel_messages (migration 0010): one row per non-empty Channel
_CHANNEL_SIZES = "SELECT channel, size FROM channel_sizes WHERE run_id=?"
_SINGLETONS_FROM = (
    "SELECT name, value, blob_hash, size FROM attributes WHERE run_id=? AND name>=? ORDER BY name"
)


_SNAPSHOT_TYPES = 1024  # Flow types whose maps are remembered
_SNAPSHOT_MAPS = 64  # maps remembered per Flow type


def _snapshot_between_sql(maps: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """One statement: the run's names outside every ``<map>/`` range, then its Channels.

    Returns the SQL (``?1`` is the run) and the bounds its other parameters take, in
    order. The ranges of distinct maps are disjoint (a map's name holds no "/"), so the
    gaps between them, in order, are the names left. No ``ORDER BY``: each arm is a range
    of the primary key and nothing needs sorting.
    """
    arms: list[str] = []
    bounds: list[str] = []
    low = ""
    for start, end in sorted((m + "/", m + "0") for m in maps):
        bounds += [low, start]
        arms.append(f"name>=?{len(bounds)} AND name<?{len(bounds) + 1}")
        low = end
    bounds.append(low)
    arms.append(f"name>=?{len(bounds) + 1}")
    select = "SELECT 0, name, value, blob_hash, size FROM attributes WHERE run_id=?1 AND "
    sql = (
        " UNION ALL ".join(select + arm for arm in arms)
        + " UNION ALL SELECT 1, channel, NULL, NULL, size FROM channel_sizes WHERE run_id=?1"
    )
    return sql, tuple(bounds)


_WRITE_CHUNK = 500  # names per statement, well under SQLite's bound on parameters


def _blob(record: object) -> bytearray:
    """``record`` encoded for a BLOB parameter.

    ``sqlite3`` binds a ``bytearray`` as it is, while each ``bytes`` parameter (and each
    ``None``) first goes through its adapter lookup, whose failed attribute lookups cost
    several times the binding itself; the hot statements pass ``bytearray`` and literal
    ``NULL`` s instead.
    """
    buf = bytearray()
    record_encoder.encode_into(record, buf)
    return buf


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _channel_sizes(c: sqlite3.Connection, run_id: str) -> dict[str, int]:
    return {r[0]: r[1] for r in c.execute(_CHANNEL_SIZES, (run_id,))}


class SqliteFlows:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def insert(self, flow: FlowRecord) -> bool:
        cur = self.c.execute(
            "INSERT INTO flows (run_id, flow_id, flow_type, status, request_id, retain_until,"
            " data, started_at, closed_at) VALUES (?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT (flow_id) WHERE status='running' DO NOTHING",
            (
                flow.run_id,
                flow.flow_id,
                flow.flow_type,
                flow.status,
                flow.request_id,
                flow.retain_until,
                record_encoder.encode(flow),
                flow.started_at,
                flow.closed_at,
            ),
        )
        return cur.rowcount > 0

    def update(self, flow: FlowRecord) -> None:
        data = _blob(flow)
        # SQLite rewrites the index entries of every column an UPDATE sets, changed or not:
        # while a run's indexed columns stay as they are (every Step of a running run),
        # set its data alone and write one page to the WAL instead of three
        if flow.retain_until is None and flow.closed_at is None:
            cur = self.c.execute(
                "UPDATE flows SET data=? WHERE run_id=? AND status=? AND retain_until IS NULL"
                " AND closed_at IS NULL",
                (data, flow.run_id, flow.status),
            )
        else:
            cur = self.c.execute(
                "UPDATE flows SET data=? WHERE run_id=? AND status=? AND retain_until IS ?"
                " AND closed_at IS ?",
                (data, flow.run_id, flow.status, flow.retain_until, flow.closed_at),
            )
        if cur.rowcount == 0:
            self.c.execute(
                "UPDATE flows SET status=?, retain_until=?, data=?, closed_at=? WHERE run_id=?",
                (flow.status, flow.retain_until, data, flow.closed_at, flow.run_id),
            )

    def get(self, run_id: str) -> FlowRecord | None:
        row = self.c.execute("SELECT data FROM flows WHERE run_id=?", (run_id,)).fetchone()
        return flow_decoder.decode(row[0]) if row else None

    def get_with_execution(
        self, run_id: str, execution_id: str
    ) -> tuple[FlowRecord | None, ExecRecord | None]:
        # one statement for both: every Step result loads them
        row = self.c.execute(_FLOW_WITH_EXEC, (execution_id, run_id)).fetchone()
        if row is None:
            return None, None
        flow = flow_decoder.decode(row[0])
        if row[1] is None:
            return flow, None
        return flow, with_claim(exec_decoder.decode(row[1]), row[2], row[3])

    def latest(self, flow_id: str) -> FlowRecord | None:
        # the running run, whatever its id (another server's clock may make it the smaller)
        row = self.c.execute(
            "SELECT data FROM flows WHERE flow_id=? ORDER BY status='running' DESC, run_id DESC"
            " LIMIT 1",
            (flow_id,),
        ).fetchone()
        return flow_decoder.decode(row[0]) if row else None

    def page(
        self, *, flow_type: str | None, status: str | None, limit: int, before_run_id: str | None
    ) -> list[FlowRecord]:
        sql = "SELECT data FROM flows WHERE 1=1"
        args: list[object] = []
        if flow_type:
            sql += " AND flow_type=?"
            args.append(flow_type)
        if status:
            sql += " AND status=?"
            args.append(status)
        else:
            # a run that continued as new is listed only when asked for by status
            sql += " AND status<>'continued_as_new'"
        if before_run_id:
            sql += " AND run_id<?"
            args.append(before_run_id)
        sql += " ORDER BY run_id DESC LIMIT ?"
        args.append(limit)
        return [flow_decoder.decode(r[0]) for r in self.c.execute(sql, args)]

    def running(self) -> list[FlowRecord]:
        rows = self.c.execute("SELECT data FROM flows WHERE status='running'")
        return [flow_decoder.decode(r[0]) for r in rows]

    def due_for_deletion(self, now: float, limit: int) -> list[str]:
        rows = self.c.execute(
            "SELECT run_id FROM flows WHERE retain_until IS NOT NULL AND retain_until<=?"
            " ORDER BY retain_until LIMIT ?",
            (now, limit),
        )
        return [r[0] for r in rows]

    def delete(self, run_id: str) -> None:
        self.c.execute("DELETE FROM flows WHERE run_id=?", (run_id,))


class SqliteSpecs:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def put(self, version: str, spec: FlowSpec, now: float) -> None:
        self.c.execute(
            "INSERT INTO flow_specs (flow_type, version, spec, updated_at) VALUES (?,?,?,?)"
            " ON CONFLICT (flow_type, version) DO UPDATE SET updated_at=excluded.updated_at",
            (spec.flow_type, version, record_encoder.encode(spec), now),
        )

    def get(self, flow_type: str, version: str) -> FlowSpec | None:
        row = self.c.execute(
            "SELECT spec FROM flow_specs WHERE flow_type=? AND version=?", (flow_type, version)
        ).fetchone()
        return _spec_decoder.decode(row[0]) if row else None

    def latest(self, flow_type: str) -> tuple[str, FlowSpec] | None:
        row = self.c.execute(
            "SELECT version, spec FROM flow_specs WHERE flow_type=?"
            " ORDER BY updated_at DESC LIMIT 1",
            (flow_type,),
        ).fetchone()
        return (row[0], _spec_decoder.decode(row[1])) if row else None

    def all(self) -> list[tuple[str, FlowSpec, float]]:
        rows = self.c.execute("SELECT version, spec, updated_at FROM flow_specs")
        return [(r[0], _spec_decoder.decode(r[1]), r[2]) for r in rows]


class SqliteExecutions:
    def __init__(self, conn: sqlite3.Connection, server_id: str) -> None:
        self.c = conn
        self.me = server_id

    def put(self, e: ExecRecord) -> None:
        claim(e, self.me)
        if e.phase == "waiting":  # unclaimed and not ready: no NULL parameters (see _blob)
            self.c.execute(
                "INSERT OR REPLACE INTO executions (run_id, execution_id, phase, data,"
                " ready_at, claimed_by, claim_epoch) VALUES (?,?,?,?,NULL,NULL,?)",
                (e.run_id, e.execution_id, e.phase, _blob(e), e.claim_epoch),
            )
            return
        self.c.execute(
            "INSERT OR REPLACE INTO executions (run_id, execution_id, phase, data, ready_at,"
            " claimed_by, claim_epoch) VALUES (?,?,?,?,?,?,?)",
            (
                e.run_id,
                e.execution_id,
                e.phase,
                _blob(e),
                e.not_before,
                e.claimed_by,
                e.claim_epoch,
            ),
        )

    def get(self, run_id: str, execution_id: str) -> ExecRecord | None:
        row = self.c.execute(_EXEC_GET, (run_id, execution_id)).fetchone()
        return with_claim(exec_decoder.decode(row[0]), row[1], row[2]) if row else None

    def delete(self, run_id: str, execution_id: str) -> None:
        key = (run_id, execution_id)
        self.c.execute("DELETE FROM executions WHERE run_id=? AND execution_id=?", key)
        self.c.execute("DELETE FROM timers WHERE run_id=? AND execution_id=?", key)

    def of_run(self, run_id: str) -> list[ExecRecord]:
        rows = self.c.execute(
            "SELECT data, claimed_by, claim_epoch FROM executions WHERE run_id=?", (run_id,)
        )
        return [with_claim(exec_decoder.decode(r[0]), r[1], r[2]) for r in rows]

    def waiting(self, run_id: str) -> list[ExecRecord]:
        rows = self.c.execute(
            "SELECT data, claimed_by, claim_epoch FROM executions"
            " WHERE run_id=? AND phase='waiting'",
            (run_id,),
        )
        return [with_claim(exec_decoder.decode(r[0]), r[1], r[2]) for r in rows]

    def delete_run(self, run_id: str) -> None:
        self.c.execute("DELETE FROM executions WHERE run_id=?", (run_id,))


class SqliteState:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn
        # per Flow type, the maps whose instances its runs hold: a task snapshot then reads
        # the singletons between their ranges, and the Channel sizes, in one statement
        self._maps: dict[str, tuple[str, ...]] = {}
        self._between: dict[tuple[str, ...], tuple[str, tuple[str, ...]]] = {}
        # snapshots read for snapshot_later, handed on once the transaction committed
        self._later: list[tuple[Callable[[Snapshot | None], None], Snapshot | None]] = []

    @staticmethod
    def _value(value: bytes | None, blob: str | None, size: int) -> StoredValue:
        return StoredValue(
            value=msgspec.Raw(value) if value is not None else None, blob=blob, size=size
        )

    def get(self, run_id: str, name: str) -> StoredValue | None:
        row = self.c.execute(
            "SELECT value, blob_hash, size FROM attributes WHERE run_id=? AND name=?",
            (run_id, name),
        ).fetchone()
        return self._value(*row) if row else None

    def singletons(self, run_id: str) -> dict[str, StoredValue]:
        return self._walk(run_id, set())

    def _walk(self, run_id: str, heads: set[str]) -> dict[str, StoredValue]:
        # Every Step task loads the singletons, so the cost must not grow with a map's
        # instances (an agent's messages): walk the run's names in key order and, after a
        # few consecutive instances of one map, jump past its "<map>/..." range (to
        # "<map>0", the next string after all of them) instead of reading every row.
        # ``heads`` collects the maps seen on the way.
        out: dict[str, StoredValue] = {}
        bound = ""
        while True:
            jump = None
            in_map, seen = "", 0
            for name, value, blob, size in self.c.execute(_SINGLETONS_FROM, (run_id, bound)):
                if "/" not in name:
                    out[name] = self._value(value, blob, size)
                    continue
                head = name.partition("/")[0]
                heads.add(head)
                seen = seen + 1 if head == in_map else 1
                in_map = head
                if seen >= _SINGLETONS_SKIP_AFTER:
                    jump = head + "0"
                    break
            if jump is None:
                return out
            bound = jump

    def snapshot(self, run_id: str, flow_type: str = "") -> Snapshot:
        maps = self._maps.get(flow_type) if flow_type else None
        if maps is not None:
            snap = self._snapshot_between(run_id, flow_type, maps)
            if snap is not None:
                return snap
        heads: set[str] = set()
        values = self._walk(run_id, heads)
        if flow_type:
            self._learn(flow_type, heads)
        return values, _channel_sizes(self.c, run_id)

    def _snapshot_between(
        self, run_id: str, flow_type: str, maps: tuple[str, ...]
    ) -> Snapshot | None:
        """The snapshot in one statement that skips the ranges of ``maps``' instances.

        A singleton's name holds no "/", so it never falls in a map's "<map>/..." range,
        whatever ``maps`` holds: the maps only decide how many rows are read. Instances of
        a map not in ``maps`` are read and dropped, and the map is learnt; ``None`` (walk
        instead) once more of them came than a walk would read.
        """
        between = self._between.get(maps)
        if between is None:
            if len(self._between) >= _SNAPSHOT_TYPES:
                self._between.clear()
            between = self._between[maps] = _snapshot_between_sql(maps)
        sql, bounds = between
        values: dict[str, StoredValue] = {}
        sizes: dict[str, int] = {}
        heads: set[str] = set()
        strays = 0
        for channel_row, name, value, blob, size in self.c.execute(sql, (run_id, *bounds)):
            if channel_row:
                sizes[name] = size
            elif "/" not in name:
                values[name] = self._value(value, blob, size)
            else:
                heads.add(name.partition("/")[0])
                strays += 1
                if strays >= _SINGLETONS_SKIP_AFTER:
                    return None
        if heads:
            self._learn(flow_type, heads)
        return values, sizes

    def _learn(self, flow_type: str, heads: set[str]) -> None:
        known = self._maps.get(flow_type, ())
        if known and heads <= set(known):
            return
        if len(self._maps) >= _SNAPSHOT_TYPES and flow_type not in self._maps:
            self._maps.clear()  # a bound for a store with ever new Flow types
        self._maps[flow_type] = tuple(sorted({*known, *heads}))[:_SNAPSHOT_MAPS]

    def snapshot_later(
        self, run_id: str, fill: Callable[[Snapshot | None], None], flow_type: str = ""
    ) -> None:
        self._later.append((fill, self.snapshot(run_id, flow_type)))

    def run_later(self) -> None:
        """The transaction committed: hand each snapshot read for it to its ``fill``."""
        later, self._later = self._later, []
        for fill, snap in later:
            try:
                fill(snap)
            except Exception:  # the rows are durable: one bad fill must not fail the others
                log.exception("handing on a task snapshot after its commit failed")

    def drop_later(self) -> None:
        """The transaction did not commit: its snapshots are void."""
        self._later = []

    def of_maps(self, run_id: str, maps: Sequence[str]) -> dict[str, StoredValue]:
        if not maps:
            return {}
        # Without statistics the planner prefers the primary key's run_id prefix and scans
        # every Attribute of the run; the map index reads only the maps asked for.
        rows = self.c.execute(
            "SELECT name, value, blob_hash, size FROM attributes INDEXED BY attributes_by_map"
            f" WHERE run_id=? AND map_name IN ({_marks(len(maps))})",
            (run_id, *maps),
        )
        return {r[0]: self._value(r[1], r[2], r[3]) for r in rows}

    def of_names(self, run_id: str, names: Sequence[str]) -> dict[str, StoredValue]:
        if not names:
            return {}
        rows = self.c.execute(
            "SELECT name, value, blob_hash, size FROM attributes WHERE run_id=? AND name"
            f" IN ({_marks(len(names))})",
            (run_id, *names),
        )
        return {r[0]: self._value(r[1], r[2], r[3]) for r in rows}

    def of_range(
        self, run_id: str, map_name: str, start: str | None, end: str | None, limit: int | None
    ) -> list[tuple[str, StoredValue]]:
        # a map's instances are "<map>/..." names: "<map>0" is the first name after them
        low = start if start is not None and start > map_name + "/" else map_name + "/"
        high = end if end is not None and end < map_name + "0" else map_name + "0"
        rows = self.c.execute(
            "SELECT name, value, blob_hash, size FROM attributes WHERE run_id=? AND name>=?"
            " AND name<? ORDER BY name LIMIT ?",
            (run_id, low, high, -1 if limit is None else limit),
        )
        return [(r[0], self._value(r[1], r[2], r[3])) for r in rows]

    def names(self, run_id: str) -> list[str]:
        rows = self.c.execute("SELECT name FROM attributes WHERE run_id=? ORDER BY name", (run_id,))
        return [r[0] for r in rows]

    def write(self, run_id: str, name: str, value: StoredValue | None) -> int:
        """Write or delete one value; return the change in stored bytes."""
        return self.write_many(run_id, ((name, value),))

    def sizes_of(self, run_id: str, names: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for at in range(0, len(names), _WRITE_CHUNK):
            chunk = names[at : at + _WRITE_CHUNK]
            out.update(
                self.c.execute(
                    "SELECT name, size FROM attributes WHERE run_id=? AND name"
                    f" IN ({_marks(len(chunk))})",
                    (run_id, *chunk),
                )
            )
        return out

    def write_many(
        self,
        run_id: str,
        writes: Sequence[tuple[str, StoredValue | None]],
        old_sizes: Mapping[str, int] | None = None,
    ) -> int:
        """Write or delete values (each name once); return the change in stored bytes.

        The sizes they replace are read in one statement per chunk, not one per value
        (none when ``old_sizes`` has them).
        """
        delta = 0
        for at in range(0, len(writes), _WRITE_CHUNK):
            chunk = writes[at : at + _WRITE_CHUNK]
            if old_sizes is None:
                old = self.sizes_of(run_id, [name for name, _ in chunk])
            else:
                old = {name: old_sizes[name] for name, _ in chunk if name in old_sizes}
            delta -= sum(old.values())
            gone = [(run_id, name) for name, value in chunk if value is None and name in old]
            if gone:
                self.c.executemany("DELETE FROM attributes WHERE run_id=? AND name=?", gone)
            kept = [(name, value) for name, value in chunk if value is not None]
            if kept:
                self._insert(run_id, kept)
            delta += sum(value.size for _, value in kept)
        return delta

    def _insert(self, run_id: str, values: list[tuple[str, StoredValue]]) -> None:
        # A value kept inline binds no NULLs (see _blob): its map and blob columns are
        # written as literals, one statement for each map column a chunk holds.
        blobs: list[tuple[object, ...]] = []
        singles: list[tuple[object, ...]] = []
        instances: list[tuple[object, ...]] = []
        for name, v in values:
            data = bytearray(v.value) if v.value is not None else None
            map_name = map_of(name)
            if v.blob is not None:
                blobs.append((run_id, name, map_name, data, v.blob, v.size))
            elif map_name is None:
                singles.append((run_id, name, data, v.size))
            else:
                instances.append((run_id, name, map_name, data, v.size))
        for sql, rows in (
            ("VALUES (?,?,?,?,?,?)", blobs),
            ("VALUES (?,?,NULL,?,NULL,?)", singles),
            ("VALUES (?,?,?,?,NULL,?)", instances),
        ):
            if rows:
                self.c.executemany(
                    "INSERT OR REPLACE INTO attributes"
                    " (run_id, name, map_name, value, blob_hash, size) " + sql,
                    rows,
                )

    def delete_run(self, run_id: str) -> None:
        self.c.execute("DELETE FROM attributes WHERE run_id=?", (run_id,))


class SqliteChannels:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def publish(self, run_id: str, channel: str, message_id: str, value: bytes) -> None:
        map_name = map_of(channel)
        if map_name is None:  # no NULL parameter (see _blob)
            self.c.execute(
                "INSERT INTO channel_messages (run_id, channel, map_name, message_id, value)"
                " VALUES (?,?,NULL,?,?)",
                (run_id, channel, message_id, bytearray(value)),
            )
            return
        self.c.execute(
            "INSERT INTO channel_messages (run_id, channel, map_name, message_id, value)"
            " VALUES (?,?,?,?,?)",
            (run_id, channel, map_name, message_id, bytearray(value)),
        )

    def pending_ids(
        self,
        run_id: str,
        channels: Iterable[str],
        limits: Mapping[str, int | None] | None = None,
    ) -> dict[str, list[str]]:
        # one ranged read of channel_messages_by_channel per Channel, stopping at its limit
        out: dict[str, list[str]] = {}
        for name in sorted(set(channels)):
            limit = limits.get(name) if limits is not None else None
            rows = self.c.execute(
                "SELECT message_id FROM channel_messages WHERE run_id=? AND channel=?"
                " ORDER BY seq LIMIT ?",
                (run_id, name, -1 if limit is None else limit),
            )
            out[name] = [r[0] for r in rows]
        return out

    def take(self, run_id: str, message_ids: Sequence[str]) -> dict[str, PendingMessage]:
        if not message_ids:
            return {}
        out: dict[str, PendingMessage] = {}
        for i in range(0, len(message_ids), 500):
            chunk = message_ids[i : i + 500]
            rows = self.c.execute(
                "DELETE FROM channel_messages WHERE run_id=? AND message_id"
                f" IN ({_marks(len(chunk))}) RETURNING seq, channel, message_id, value",
                (run_id, *chunk),
            ).fetchall()
            for seq, ch, mid, value in rows:
                out[mid] = PendingMessage(
                    seq=seq, channel=ch, message_id=mid, value=msgspec.Raw(value)
                )
        return out

    def delete(self, run_id: str, channel: str, message_id: str) -> int | None:
        row = self.c.execute(
            "DELETE FROM channel_messages WHERE run_id=? AND channel=? AND message_id=?"
            " RETURNING length(value)",
            (run_id, channel, message_id),
        ).fetchone()
        return int(row[0]) if row else None

    def sizes(self, run_id: str) -> dict[str, int]:
        return _channel_sizes(self.c, run_id)

    def pending(
        self, run_id: str, channels: Sequence[str], maps: Sequence[str]
    ) -> list[PendingMessage]:
        if not channels and not maps:
            return []
        rows = self.c.execute(
            "SELECT seq, channel, message_id, value FROM channel_messages WHERE run_id=? AND"
            f" (channel IN ({_marks(len(channels))}) OR map_name IN ({_marks(len(maps))}))"
            " ORDER BY seq",
            (run_id, *channels, *maps),
        )
        return [
            PendingMessage(seq=s, channel=ch, message_id=m, value=msgspec.Raw(v))
            for s, ch, m, v in rows
        ]

    def delete_run(self, run_id: str) -> None:
        self.c.execute("DELETE FROM channel_messages WHERE run_id=?", (run_id,))


class SqliteTimers:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def take(self, run_id: str, execution_id: str, fire_at: float) -> bool:
        cur = self.c.execute(
            "DELETE FROM timers WHERE run_id=? AND execution_id=? AND fire_at=?",
            (run_id, execution_id, fire_at),
        )
        return cur.rowcount > 0

    def add(self, run_id: str, execution_id: str, fire_at: float) -> None:
        self.c.execute(
            "INSERT OR IGNORE INTO timers (run_id, execution_id, fire_at) VALUES (?,?,?)",
            (run_id, execution_id, fire_at),
        )

    def clear(self, run_id: str, execution_id: str) -> None:
        self.c.execute(
            "DELETE FROM timers WHERE run_id=? AND execution_id=?", (run_id, execution_id)
        )

    def due_before(self, t: float, limit: int) -> list[tuple[float, str, str]]:
        rows = self.c.execute(
            "SELECT fire_at, run_id, execution_id FROM timers WHERE fire_at<=?"
            " ORDER BY fire_at LIMIT ?",
            (t, limit),
        )
        return [(r[0], r[1], r[2]) for r in rows]

    def delete_run(self, run_id: str) -> None:
        self.c.execute("DELETE FROM timers WHERE run_id=?", (run_id,))


class SqliteHistory:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def append(
        self, run_id: str, event_id: int, event_time: float, type_: str, payload: bytes
    ) -> None:
        self.c.execute(
            "INSERT INTO history (run_id, event_id, event_time, type, payload) VALUES (?,?,?,?,?)",
            (run_id, event_id, event_time, type_, bytearray(payload)),
        )

    def page(self, run_id: str, after: int, limit: int) -> list[tuple[int, float, str, bytes]]:
        rows = self.c.execute(
            "SELECT event_id, event_time, type, payload FROM history WHERE run_id=? AND"
            " event_id>? ORDER BY event_id LIMIT ?",
            (run_id, after, limit),
        )
        return [(r[0], r[1], r[2], r[3]) for r in rows]

    def delete_run(self, run_id: str) -> None:
        self.c.execute("DELETE FROM history WHERE run_id=?", (run_id,))


class SqliteRpcRequests:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def add(self, run_id: str, request_id: str, output: bytes | None, now: float) -> bool:
        cur = self.c.execute(
            "INSERT INTO rpc_requests (run_id, request_id, output, created_at) VALUES (?,?,?,?)"
            " ON CONFLICT DO NOTHING",
            (run_id, request_id, output, now),
        )
        return cur.rowcount > 0

    def get(self, run_id: str, request_id: str) -> tuple[bytes | None] | None:
        row = self.c.execute(
            "SELECT output FROM rpc_requests WHERE run_id=? AND request_id=?", (run_id, request_id)
        ).fetchone()
        if row is None:
            return None
        return (bytes(row[0]) if row[0] is not None else None,)

    def delete_run(self, run_id: str) -> None:
        self.c.execute("DELETE FROM rpc_requests WHERE run_id=?", (run_id,))


class SqliteBlobs:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def put(self, hash_: str, data: bytes) -> None:
        self.c.execute("INSERT OR IGNORE INTO blobs (hash, data) VALUES (?,?)", (hash_, data))

    def get(self, hash_: str) -> bytes | None:
        row = self.c.execute("SELECT data FROM blobs WHERE hash=?", (hash_,)).fetchone()
        return bytes(row[0]) if row else None

    def reference(self, run_id: str, hash_: str) -> None:
        self.c.execute(
            "INSERT OR IGNORE INTO blob_refs (run_id, hash) VALUES (?,?)", (run_id, hash_)
        )

    def release_run(self, run_id: str) -> int:
        """Drop the run's references and every blob nothing references any more."""
        hashes = [
            r[0]
            for r in self.c.execute(
                "DELETE FROM blob_refs WHERE run_id=? RETURNING hash", (run_id,)
            ).fetchall()
        ]
        deleted = 0
        for h in hashes:
            cur = self.c.execute(
                "DELETE FROM blobs WHERE hash=? AND NOT EXISTS"
                " (SELECT 1 FROM blob_refs WHERE hash=?)",
                (h, h),
            )
            deleted += cur.rowcount
        return deleted
