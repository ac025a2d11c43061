"""PostgreSQL repositories of the store contract (psycopg 3, synchronous).

Lists are passed as arrays (``= ANY(%s)``) so each statement has one text and psycopg
prepares it once per connection. In a writing transaction ``flows.get`` / ``latest`` take
the row lock (``FOR UPDATE``): two servers committing for the same run serialise on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence

import msgspec
import psycopg
from dex._protocol import FlowSpec

from dex_server.store._contract import Snapshot
from dex_server.store._records import (
    ExecRecord,
    FlowRecord,
    PendingMessage,
    StoredValue,
    attribute_row,
    claim,
    exec_decoder,
    flow_decoder,
    map_of,
    record_encoder,
    with_claim,
)
from dex_server.store.postgres._pipeline import Handle, Pipeline

_spec_decoder = msgspec.json.Decoder(FlowSpec)
log = logging.getLogger("dex_server.store")
_FLOW_GET = "SELECT data FROM flows WHERE run_id=%s"
_EXEC_GET = (
    "SELECT data, claimed_by, claim_epoch FROM executions WHERE run_id=%s AND execution_id=%s"
)
_SINGLETONS = (
    "SELECT name, value, blob_hash, size FROM attributes WHERE run_id=%s AND map_name IS NULL"
)
# kept by a trigger on channel_messages (migration 0010): one row per non-empty Channel
_CHANNEL_SIZES = "SELECT channel, size FROM channel_sizes WHERE run_id=%s"
# a task snapshot's singletons and Channel sizes in one statement (each statement costs the
# client about as much as the reading itself); the first column marks a Channel's row
_SNAPSHOT = (
    "SELECT false, name, value, blob_hash, size FROM attributes"
    " WHERE run_id=%s AND map_name IS NULL"
    " UNION ALL SELECT true, channel, NULL, NULL, size FROM channel_sizes WHERE run_id=%s"
)


class _Repo:
    def __init__(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        *,
        writer: bool,
        server_id: str,
        pipe: Pipeline | None = None,
    ) -> None:
        self.c = conn
        self.lock = " FOR UPDATE" if writer else ""
        self.me = server_id
        # the writer's transactions run on this bare pipeline while it is active
        self.pipe = pipe
        # reused, not one new cursor per statement (a cursor costs as much as a statement's
        # own work): reads fetch at once, and no write's result is ever read
        self._reads = conn.cursor()
        self._writes = conn.cursor()

    def bare(self) -> Pipeline | None:
        """The writer's bare pipeline while a group runs on it, else ``None`` (psycopg)."""
        pipe = self.pipe
        return pipe if pipe is not None and pipe.active else None

    def rows(self, sql: str, args: Sequence[object] = ()) -> list[tuple[object, ...]]:
        if pipe := self.bare():
            return pipe.rows(sql, args)
        return self._reads.execute(sql, args).fetchall()

    def row(self, sql: str, args: Sequence[object] = ()) -> tuple[object, ...] | None:
        if pipe := self.bare():
            found = pipe.rows(sql, args)
            return found[0] if found else None
        return self._reads.execute(sql, args).fetchone()

    def run(self, sql: str, args: Sequence[object] = ()) -> None:
        # no result is read: in pipeline mode the statement is queued, not waited for
        if pipe := self.bare():
            pipe.run(sql, args)
            return
        self._writes.execute(sql, args)


def _b(v: object) -> bytes:
    assert isinstance(v, bytes | memoryview)
    return bytes(v)


class PgFlows(_Repo):
    def __init__(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        *,
        writer: bool,
        server_id: str,
        pipe: Pipeline | None = None,
    ) -> None:
        super().__init__(conn, writer=writer, server_id=server_id, pipe=pipe)
        self._pair = conn.cursor()  # the second of two reads in flight at once

    def insert(self, flow: FlowRecord) -> bool:
        # a concurrent start of the same Flow ID waits here for the other transaction
        row = self.row(
            "INSERT INTO flows (run_id, flow_id, flow_type, status, request_id, retain_until,"
            " data, started_at, closed_at) VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s)"
            " ON CONFLICT (flow_id) WHERE status='running' DO NOTHING RETURNING 1",
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
        return row is not None

    def update(self, flow: FlowRecord) -> None:
        self.run(
            "UPDATE flows SET status=%s, retain_until=%s, data=%s, closed_at=%s WHERE run_id=%s",
            (
                flow.status,
                flow.retain_until,
                record_encoder.encode(flow),
                flow.closed_at,
                flow.run_id,
            ),
        )

    def get(self, run_id: str) -> FlowRecord | None:
        row = self.row(_FLOW_GET + self.lock, (run_id,))
        return flow_decoder.decode(_b(row[0])) if row else None

    def get_with_execution(
        self, run_id: str, execution_id: str
    ) -> tuple[FlowRecord | None, ExecRecord | None]:
        # both queued before either is read: in pipeline mode one round trip, not two
        if pipe := self.bare():
            flow_h = pipe.send(_FLOW_GET + self.lock, (run_id,))
            exec_rows = pipe.fetch(pipe.send(_EXEC_GET, (run_id, execution_id)))
            flow_rows = pipe.fetch(flow_h)
            flow = flow_rows[0] if flow_rows else None
            e = exec_rows[0] if exec_rows else None
        else:
            flow_cur = self._reads.execute(_FLOW_GET + self.lock, (run_id,))
            exec_cur = self._pair.execute(_EXEC_GET, (run_id, execution_id))
            flow, e = flow_cur.fetchone(), exec_cur.fetchone()
        if flow is None:
            return None, None
        return (
            flow_decoder.decode(_b(flow[0])),
            with_claim(exec_decoder.decode(_b(e[0])), e[1], e[2]) if e else None,
        )

    def latest(self, flow_id: str) -> FlowRecord | None:
        # the running run, whatever its id: run ids come from several servers' clocks
        row = self.row(
            "SELECT data FROM flows WHERE flow_id=%s ORDER BY status='running' DESC,"
            " run_id DESC LIMIT 1" + self.lock,
            (flow_id,),
        )
        return flow_decoder.decode(_b(row[0])) if row else None

    def page(
        self, *, flow_type: str | None, status: str | None, limit: int, before_run_id: str | None
    ) -> list[FlowRecord]:
        sql = "SELECT data FROM flows WHERE true"
        args: list[object] = []
        if flow_type:
            sql += " AND flow_type=%s"
            args.append(flow_type)
        if status:
            sql += " AND status=%s"
            args.append(status)
        else:
            # a run that continued as new is listed only when asked for by status
            sql += " AND status<>'continued_as_new'"
        if before_run_id:
            sql += " AND run_id<%s"
            args.append(before_run_id)
        sql += " ORDER BY run_id DESC LIMIT %s"
        args.append(limit)
        return [flow_decoder.decode(_b(r[0])) for r in self.rows(sql, args)]

    def running(self) -> list[FlowRecord]:
        rows = self.rows("SELECT data FROM flows WHERE status='running'")
        return [flow_decoder.decode(_b(r[0])) for r in rows]

    def due_for_deletion(self, now: float, limit: int) -> list[str]:
        rows = self.rows(
            "SELECT run_id FROM flows WHERE retain_until IS NOT NULL AND retain_until<=%s"
            " ORDER BY retain_until LIMIT %s",
            (now, limit),
        )
        return [str(r[0]) for r in rows]

    def delete(self, run_id: str) -> None:
        self.run("DELETE FROM flows WHERE run_id=%s", (run_id,))


class PgSpecs(_Repo):
    def put(self, version: str, spec: FlowSpec, now: float) -> None:
        self.run(
            "INSERT INTO flow_specs (flow_type, version, spec, updated_at) VALUES (%s,%s,%s,%s)"
            " ON CONFLICT (flow_type, version) DO UPDATE SET updated_at=excluded.updated_at",
            (spec.flow_type, version, record_encoder.encode(spec), now),
        )

    def get(self, flow_type: str, version: str) -> FlowSpec | None:
        row = self.row(
            "SELECT spec FROM flow_specs WHERE flow_type=%s AND version=%s", (flow_type, version)
        )
        return _spec_decoder.decode(_b(row[0])) if row else None

    def latest(self, flow_type: str) -> tuple[str, FlowSpec] | None:
        row = self.row(
            "SELECT version, spec FROM flow_specs WHERE flow_type=%s"
            " ORDER BY updated_at DESC LIMIT 1",
            (flow_type,),
        )
        return (str(row[0]), _spec_decoder.decode(_b(row[1]))) if row else None

    def all(self) -> list[tuple[str, FlowSpec, float]]:
        rows = self.rows("SELECT version, spec, updated_at FROM flow_specs")
        return [(str(r[0]), _spec_decoder.decode(_b(r[1])), float(r[2])) for r in rows]  # type: ignore[arg-type]


class PgExecutions(_Repo):
    def put(self, e: ExecRecord) -> None:
        ready = e.not_before if e.phase != "waiting" else None
        claim(e, self.me)
        self.run(
            "INSERT INTO executions (run_id, execution_id, phase, data, ready_at, claimed_by,"
            " claim_epoch) VALUES (%s,%s,%s,%s,%s,%s,%s) ON CONFLICT (run_id, execution_id) DO"
            " UPDATE SET phase=excluded.phase, data=excluded.data, ready_at=excluded.ready_at,"
            " claimed_by=excluded.claimed_by, claim_epoch=excluded.claim_epoch, released_at=NULL",
            (
                e.run_id,
                e.execution_id,
                e.phase,
                record_encoder.encode(e),
                ready,
                e.claimed_by,
                e.claim_epoch,
            ),
        )

    def get(self, run_id: str, execution_id: str) -> ExecRecord | None:
        row = self.row(_EXEC_GET, (run_id, execution_id))
        return with_claim(exec_decoder.decode(_b(row[0])), row[1], row[2]) if row else None

    def delete(self, run_id: str, execution_id: str) -> None:
        # one statement for both (each statement costs the client as much as its work)
        self.run(
            "WITH t AS (DELETE FROM timers WHERE run_id=%s AND execution_id=%s)"
            " DELETE FROM executions WHERE run_id=%s AND execution_id=%s",
            (run_id, execution_id, run_id, execution_id),
        )

    def of_run(self, run_id: str) -> list[ExecRecord]:
        rows = self.rows(
            "SELECT data, claimed_by, claim_epoch FROM executions WHERE run_id=%s", (run_id,)
        )
        return [with_claim(exec_decoder.decode(_b(r[0])), r[1], r[2]) for r in rows]

    def waiting(self, run_id: str) -> list[ExecRecord]:
        rows = self.rows(
            "SELECT data, claimed_by, claim_epoch FROM executions"
            " WHERE run_id=%s AND phase='waiting'",
            (run_id,),
        )
        return [with_claim(exec_decoder.decode(_b(r[0])), r[1], r[2]) for r in rows]

    def delete_run(self, run_id: str) -> None:
        self.run("DELETE FROM executions WHERE run_id=%s", (run_id,))


def _value(value: object, blob: object, size: object) -> StoredValue:
    return StoredValue(
        value=msgspec.Raw(_b(value)) if value is not None else None,
        blob=blob if isinstance(blob, str) else None,
        size=int(size),  # type: ignore[call-overload]
    )


_Cursor = psycopg.Cursor[tuple[object, ...]]


def _snapshot(rows: list[tuple[object, ...]]) -> Snapshot:
    values: dict[str, StoredValue] = {}
    sizes: dict[str, int] = {}
    for channel, name, value, blob, size in rows:
        if channel:
            sizes[str(name)] = int(size)  # type: ignore[call-overload]
        else:
            values[str(name)] = _value(value, blob, size)
    return values, sizes


class PgState(_Repo):
    def __init__(
        self,
        conn: psycopg.Connection[tuple[object, ...]],
        *,
        writer: bool,
        server_id: str,
        pipe: Pipeline | None = None,
    ) -> None:
        super().__init__(conn, writer=writer, server_id=server_id, pipe=pipe)
        self._later: list[tuple[_Cursor | Handle, Callable[[Snapshot | None], None]]] = []

    def get(self, run_id: str, name: str) -> StoredValue | None:
        row = self.row(
            "SELECT value, blob_hash, size FROM attributes WHERE run_id=%s AND name=%s",
            (run_id, name),
        )
        return _value(*row) if row else None

    def singletons(self, run_id: str) -> dict[str, StoredValue]:
        rows = self.rows(_SINGLETONS, (run_id,))
        return {str(r[0]): _value(r[1], r[2], r[3]) for r in rows}

    def snapshot(self, run_id: str, flow_type: str = "") -> Snapshot:
        return _snapshot(self.rows(_SNAPSHOT, (run_id, run_id)))

    def snapshot_later(
        self, run_id: str, fill: Callable[[Snapshot | None], None], flow_type: str = ""
    ) -> None:
        # queued now, read with the COMMIT's results (see PostgresStore._transaction)
        if pipe := self.bare():
            self._later.append((pipe.send(_SNAPSHOT, (run_id, run_id)), fill))
            return
        if self.c.pgconn.pipeline_status == psycopg.pq.PipelineStatus.OFF:
            fill(self.snapshot(run_id))  # a reader, or the store's statement-by-statement retry
            return
        cur = self.c.cursor()
        cur.execute(_SNAPSHOT, (run_id, run_id))
        self._later.append((cur, fill))

    def run_later(self) -> None:
        """The transaction committed: hand each queued snapshot to its ``fill``."""
        later, self._later = self._later, []
        for cur, fill in later:
            try:
                snap = _snapshot(cur.rows if isinstance(cur, Handle) else cur.fetchall())
            except Exception:
                log.exception("reading a task snapshot after its commit failed")
                fill(None)
            else:
                fill(snap)

    def drop_later(self) -> None:
        """The transaction did not commit: its queued snapshots are void."""
        self._later = []

    def of_maps(self, run_id: str, maps: Sequence[str]) -> dict[str, StoredValue]:
        if not maps:
            return {}
        rows = self.rows(
            "SELECT name, value, blob_hash, size FROM attributes WHERE run_id=%s"
            " AND map_name = ANY(%s)",
            (run_id, list(maps)),
        )
        return {str(r[0]): _value(r[1], r[2], r[3]) for r in rows}

    def of_names(self, run_id: str, names: Sequence[str]) -> dict[str, StoredValue]:
        if not names:
            return {}
        rows = self.rows(
            "SELECT name, value, blob_hash, size FROM attributes WHERE run_id=%s"
            " AND name = ANY(%s)",
            (run_id, list(names)),
        )
        return {str(r[0]): _value(r[1], r[2], r[3]) for r in rows}

    def of_range(
        self, run_id: str, map_name: str, start: str | None, end: str | None, limit: int | None
    ) -> list[tuple[str, StoredValue]]:
        # a map's instances are "<map>/..." names: "<map>0" is the first name after them
        low = start if start is not None and start > map_name + "/" else map_name + "/"
        high = end if end is not None and end < map_name + "0" else map_name + "0"
        rows = self.rows(
            "SELECT name, value, blob_hash, size FROM attributes WHERE run_id=%s AND name>=%s"
            " AND name<%s ORDER BY name LIMIT %s",
            (run_id, low, high, limit),
        )
        return [(str(r[0]), _value(r[1], r[2], r[3])) for r in rows]

    def names(self, run_id: str) -> list[str]:
        rows = self.rows("SELECT name FROM attributes WHERE run_id=%s ORDER BY name", (run_id,))
        return [str(r[0]) for r in rows]

    def write(self, run_id: str, name: str, value: StoredValue | None) -> int:
        """Write or delete one value; return the change in stored bytes."""
        return self.write_many(run_id, ((name, value),))

    def sizes_of(self, run_id: str, names: Sequence[str]) -> dict[str, int]:
        if not names:
            return {}
        return {
            str(name): int(size)  # type: ignore[call-overload]
            for name, size in self.rows(
                "SELECT name, size FROM attributes WHERE run_id=%s AND name = ANY(%s)",
                (run_id, list(names)),
            )
        }

    def write_many(
        self,
        run_id: str,
        writes: Sequence[tuple[str, StoredValue | None]],
        old_sizes: Mapping[str, int] | None = None,
    ) -> int:
        """Write or delete values (each name once); return the change in stored bytes.

        One statement reads the sizes they replace (each read waits for the database; the
        writes after it are queued in the pipeline), none when ``old_sizes`` has them.
        """
        if not writes:
            return 0
        if old_sizes is None:
            old = self.sizes_of(run_id, [name for name, _ in writes])
        else:
            old = {name: old_sizes[name] for name, _ in writes if name in old_sizes}
        delta = -sum(old.values())
        for name, value in writes:
            if value is None:
                if name in old:
                    self.run("DELETE FROM attributes WHERE run_id=%s AND name=%s", (run_id, name))
                continue
            self.run(
                "INSERT INTO attributes (run_id, name, map_name, value, blob_hash, size)"
                " VALUES (%s,%s,%s,%s,%s,%s) ON CONFLICT (run_id, name) DO UPDATE SET"
                " value=excluded.value, blob_hash=excluded.blob_hash, size=excluded.size",
                attribute_row(run_id, name, value),
            )
            delta += value.size
        return delta

    def delete_run(self, run_id: str) -> None:
        self.run("DELETE FROM attributes WHERE run_id=%s", (run_id,))


class PgChannels(_Repo):
    def publish(self, run_id: str, channel: str, message_id: str, value: bytes) -> None:
        self.run(
            "INSERT INTO channel_messages (run_id, channel, map_name, message_id, value)"
            " VALUES (%s,%s,%s,%s,%s)",
            (run_id, channel, map_of(channel), message_id, value),
        )

    def pending_ids(
        self,
        run_id: str,
        channels: Iterable[str],
        limits: Mapping[str, int | None] | None = None,
    ) -> dict[str, list[str]]:
        # one ranged read of channel_messages_by_channel per Channel (LIMIT NULL: no limit)
        out: dict[str, list[str]] = {}
        for name in sorted(set(channels)):
            limit = limits.get(name) if limits is not None else None
            rows = self.rows(
                "SELECT message_id FROM channel_messages WHERE run_id=%s AND channel=%s"
                " ORDER BY seq LIMIT %s",
                (run_id, name, limit),
            )
            out[name] = [str(r[0]) for r in rows]
        return out

    def take(self, run_id: str, message_ids: Sequence[str]) -> dict[str, PendingMessage]:
        if not message_ids:
            return {}
        rows = self.rows(
            "DELETE FROM channel_messages WHERE run_id=%s AND message_id = ANY(%s)"
            " RETURNING seq, channel, message_id, value",
            (run_id, list(message_ids)),
        )
        return {
            str(mid): PendingMessage(
                seq=int(seq),  # type: ignore[call-overload]
                channel=str(ch),
                message_id=str(mid),
                value=msgspec.Raw(_b(value)),
            )
            for seq, ch, mid, value in rows
        }

    def delete(self, run_id: str, channel: str, message_id: str) -> int | None:
        row = self.row(
            "DELETE FROM channel_messages WHERE run_id=%s AND channel=%s AND message_id=%s"
            " RETURNING octet_length(value)",
            (run_id, channel, message_id),
        )
        return int(row[0]) if row else None  # type: ignore[call-overload]

    def sizes(self, run_id: str) -> dict[str, int]:
        rows = self.rows(_CHANNEL_SIZES, (run_id,))
        return {str(r[0]): int(r[1]) for r in rows}  # type: ignore[call-overload]

    def pending(
        self, run_id: str, channels: Sequence[str], maps: Sequence[str]
    ) -> list[PendingMessage]:
        if not channels and not maps:
            return []
        rows = self.rows(
            "SELECT seq, channel, message_id, value FROM channel_messages WHERE run_id=%s AND"
            " (channel = ANY(%s) OR map_name = ANY(%s)) ORDER BY seq",
            (run_id, list(channels), list(maps)),
        )
        return [
            PendingMessage(
                seq=int(s),  # type: ignore[call-overload]
                channel=str(ch),
                message_id=str(m),
                value=msgspec.Raw(_b(v)),
            )
            for s, ch, m, v in rows
        ]

    def delete_run(self, run_id: str) -> None:
        self.run("DELETE FROM channel_messages WHERE run_id=%s", (run_id,))


class PgTimers(_Repo):
    def take(self, run_id: str, execution_id: str, fire_at: float) -> bool:
        return bool(
            self.rows(
                "DELETE FROM timers WHERE run_id=%s AND execution_id=%s AND fire_at=%s RETURNING 1",
                (run_id, execution_id, fire_at),
            )
        )

    def add(self, run_id: str, execution_id: str, fire_at: float) -> None:
        self.run(
            "INSERT INTO timers (run_id, execution_id, fire_at) VALUES (%s,%s,%s)"
            " ON CONFLICT DO NOTHING",
            (run_id, execution_id, fire_at),
        )

    def clear(self, run_id: str, execution_id: str) -> None:
        self.run("DELETE FROM timers WHERE run_id=%s AND execution_id=%s", (run_id, execution_id))

    def due_before(self, t: float, limit: int) -> list[tuple[float, str, str]]:
        rows = self.rows(
            "SELECT fire_at, run_id, execution_id FROM timers WHERE fire_at<=%s"
            " ORDER BY fire_at LIMIT %s",
            (t, limit),
        )
        return [(float(r[0]), str(r[1]), str(r[2])) for r in rows]  # type: ignore[arg-type]

    def delete_run(self, run_id: str) -> None:
        self.run("DELETE FROM timers WHERE run_id=%s", (run_id,))


class PgHistory(_Repo):
    def append(
        self, run_id: str, event_id: int, event_time: float, type_: str, payload: bytes
    ) -> None:
        self.run(
            "INSERT INTO history (run_id, event_id, event_time, type, payload)"
            " VALUES (%s,%s,%s,%s,%s)",
            (run_id, event_id, event_time, type_, payload),
        )

    def page(self, run_id: str, after: int, limit: int) -> list[tuple[int, float, str, bytes]]:
        rows = self.rows(
            "SELECT event_id, event_time, type, payload FROM history WHERE run_id=%s AND"
            " event_id>%s ORDER BY event_id LIMIT %s",
            (run_id, after, limit),
        )
        return [
            (int(r[0]), float(r[1]), str(r[2]), _b(r[3]))  # type: ignore[call-overload,arg-type]
            for r in rows
        ]

    def delete_run(self, run_id: str) -> None:
        self.run("DELETE FROM history WHERE run_id=%s", (run_id,))


class PgRpcRequests(_Repo):
    def add(self, run_id: str, request_id: str, output: bytes | None, now: float) -> bool:
        return bool(
            self.rows(
                "INSERT INTO rpc_requests (run_id, request_id, output, created_at)"
                " VALUES (%s,%s,%s,%s) ON CONFLICT DO NOTHING RETURNING 1",
                (run_id, request_id, output, now),
            )
        )

    def get(self, run_id: str, request_id: str) -> tuple[bytes | None] | None:
        row = self.row(
            "SELECT output FROM rpc_requests WHERE run_id=%s AND request_id=%s",
            (run_id, request_id),
        )
        if row is None:
            return None
        return (_b(row[0]) if row[0] is not None else None,)

    def delete_run(self, run_id: str) -> None:
        self.run("DELETE FROM rpc_requests WHERE run_id=%s", (run_id,))


class PgBlobs(_Repo):
    """Blobs shared by every run that stores the same large value, on several servers.

    A writer that references a blob holds a ``FOR KEY SHARE`` lock on its row until it
    commits; retention takes ``FOR UPDATE`` on the rows it may delete and only then, in a
    new statement (a new snapshot), checks for references. So a blob is never deleted
    under a transaction that is about to commit a reference to it: retention waits for it
    and sees the reference, or the writer waits for retention and inserts the blob again.
    """

    def put(self, hash_: str, data: bytes) -> None:
        while True:
            if self.row("SELECT 1 FROM blobs WHERE hash=%s FOR KEY SHARE", (hash_,)):
                return
            # a row this transaction inserts is its own until it commits
            if self.row(
                "INSERT INTO blobs (hash, data) VALUES (%s,%s) ON CONFLICT DO NOTHING RETURNING 1",
                (hash_, data),
            ):
                return
            # another transaction inserted it meanwhile: lock that row

    def get(self, hash_: str) -> bytes | None:
        row = self.row("SELECT data FROM blobs WHERE hash=%s", (hash_,))
        return _b(row[0]) if row else None

    def reference(self, run_id: str, hash_: str) -> None:
        self.run(
            "INSERT INTO blob_refs (run_id, hash) VALUES (%s,%s) ON CONFLICT DO NOTHING",
            (run_id, hash_),
        )

    def release_run(self, run_id: str) -> int:
        """Drop the run's references and every blob nothing references any more."""
        hashes = sorted(
            str(r[0])
            for r in self.rows("DELETE FROM blob_refs WHERE run_id=%s RETURNING hash", (run_id,))
        )
        if not hashes:
            return 0
        # wait for the writers referencing these blobs, then look with a fresh snapshot
        self.rows("SELECT hash FROM blobs WHERE hash = ANY(%s) ORDER BY hash FOR UPDATE", (hashes,))
        deleted = self.rows(
            "DELETE FROM blobs b WHERE b.hash = ANY(%s) AND NOT EXISTS"
            " (SELECT 1 FROM blob_refs r WHERE r.hash=b.hash) RETURNING 1",
            (hashes,),
        )
        return len(deleted)
