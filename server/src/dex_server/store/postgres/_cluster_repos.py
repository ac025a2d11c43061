"""PostgreSQL repositories for several servers: claims, servers, signals, RPC calls, Streams."""

from __future__ import annotations

from collections.abc import Sequence

from dex_server.store.postgres._repos import _b, _Repo


def _pairs(rows: list[tuple[object, ...]]) -> list[tuple[str, str]]:
    return sorted((str(r[0]), str(r[1])) for r in rows)


class PgClaims(_Repo):
    def release(
        self, run_id: str, execution_id: str, now: float, start_by: float | None = None
    ) -> None:
        self.run(
            "UPDATE executions SET claimed_by=NULL, claim_epoch=claim_epoch+1, released_at=%s,"
            " start_by=%s WHERE run_id=%s AND execution_id=%s AND claimed_by=%s",
            (now, start_by, run_id, execution_id, self.me),
        )

    def claim_pool(
        self, flow_types: Sequence[str], now: float, limit: int
    ) -> list[tuple[str, str]]:
        if not flow_types:
            return []
        return _pairs(
            self.rows(
                "UPDATE executions e SET claimed_by=%s, claim_epoch=e.claim_epoch+1,"
                " released_at=NULL FROM (SELECT x.run_id, x.execution_id FROM executions x"
                " JOIN flows f ON"
                " f.run_id=x.run_id WHERE x.claimed_by IS NULL AND x.ready_at IS NOT NULL AND"
                " x.ready_at<=%s AND f.flow_type = ANY(%s) ORDER BY x.ready_at LIMIT %s"
                " FOR UPDATE OF x SKIP LOCKED) c WHERE e.run_id=c.run_id AND"
                " e.execution_id=c.execution_id RETURNING e.run_id, e.execution_id",
                (self.me, now, list(flow_types), limit),
            )
        )

    def claim_unserved(self, now: float, limit: int) -> list[tuple[str, str]]:
        return _pairs(
            self.rows(
                "UPDATE executions e SET claimed_by=%s, claim_epoch=e.claim_epoch+1,"
                " released_at=NULL, start_by=NULL FROM (SELECT run_id, execution_id FROM"
                " executions WHERE claimed_by IS NULL AND ready_at IS NOT NULL AND"
                " start_by<=%s LIMIT %s FOR UPDATE SKIP LOCKED) c"
                " WHERE e.run_id=c.run_id AND e.execution_id=c.execution_id"
                " RETURNING e.run_id, e.execution_id",
                (self.me, now, limit),
            )
        )

    def claim_from(self, server_ids: Sequence[str]) -> list[tuple[str, str]]:
        if not server_ids:
            return []
        return _pairs(
            self.rows(
                "UPDATE executions SET claimed_by=%s, claim_epoch=claim_epoch+1 WHERE"
                " claimed_by = ANY(%s) AND ready_at IS NOT NULL RETURNING run_id, execution_id",
                (self.me, list(server_ids)),
            )
        )

    def mine_ready(self, now: float) -> list[tuple[str, str]]:
        return _pairs(
            self.rows(
                "SELECT run_id, execution_id FROM executions WHERE claimed_by=%s AND ready_at<=%s",
                (self.me, now),
            )
        )

    def lost(self, held: Sequence[tuple[str, str, int]]) -> list[tuple[str, str]]:
        if not held:
            return []
        return _pairs(
            self.rows(
                "SELECT x.run_id, x.execution_id FROM unnest(%s::text[], %s::text[],"
                " %s::bigint[]) AS k(r, e, ep) JOIN executions x ON x.run_id=k.r AND"
                " x.execution_id=k.e WHERE x.claimed_by IS DISTINCT FROM %s OR"
                " x.claim_epoch<>k.ep",
                ([h[0] for h in held], [h[1] for h in held], [h[2] for h in held], self.me),
            )
        )


# A server whose database session is gone (process killed) is dead after this grace,
# short enough for a quick takeover, long enough for a live server to reconnect.
SESSION_GRACE_S = 3.0


# The database's clock, in seconds: every heartbeat and every lease check reads it, so the
# servers' own clocks (which may disagree) never meet in a comparison.
DB_NOW = "extract(epoch FROM clock_timestamp())::float8"


class PgServers(_Repo):
    def dead(self, lease_s: float) -> list[str]:
        rows = self.rows(
            f"SELECT s.server_id FROM servers s WHERE s.server_id<>%s AND (s.heartbeat_at <"
            f" {DB_NOW} - %s OR (s.heartbeat_at < {DB_NOW} - %s AND NOT EXISTS (SELECT 1 FROM"
            " pg_stat_activity a WHERE a.pid=s.backend_pid))) FOR UPDATE OF s SKIP LOCKED",
            (self.me, lease_s, SESSION_GRACE_S),
        )
        return [str(r[0]) for r in rows]

    def remove(self, server_ids: Sequence[str]) -> None:
        self.run("DELETE FROM servers WHERE server_id = ANY(%s)", (list(server_ids),))


class PgSignals(_Repo):
    def notify(self, kind: str, data: str) -> None:
        self.run("SELECT pg_notify('dex', %s)", (f"{self.me}|{kind}|{data}",))


class PgLocks(_Repo):
    def held(self, run_id: str, keys: Sequence[str], holder: str) -> list[tuple[str, str]]:
        rows = self.rows(
            "SELECT lock_key, holder FROM attribute_locks WHERE run_id=%s AND"
            " lock_key = ANY(%s) AND holder<>%s",
            (run_id, list(keys), holder),
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    def take(self, run_id: str, keys: Sequence[str], holder: str) -> None:
        self.run(
            "INSERT INTO attribute_locks (run_id, lock_key, holder, server_id) SELECT %s, k,"
            " %s, %s FROM unnest(%s::text[]) AS k ON CONFLICT (run_id, lock_key) DO UPDATE"
            " SET holder=excluded.holder, server_id=excluded.server_id",
            (run_id, holder, self.me, list(keys)),
        )

    def mine(self, run_id: str, holder: str) -> list[str]:
        rows = self.rows(
            "SELECT lock_key FROM attribute_locks WHERE run_id=%s AND holder=%s AND"
            " server_id=%s" + self.lock,
            (run_id, holder, self.me),
        )
        return sorted(str(r[0]) for r in rows)

    def drop(self, run_id: str, key: str) -> None:
        self.run("DELETE FROM attribute_locks WHERE run_id=%s AND lock_key=%s", (run_id, key))

    def release(self, run_id: str, holder: str) -> int:
        rows = self.rows(
            "DELETE FROM attribute_locks WHERE run_id=%s AND holder=%s AND server_id=%s"
            " RETURNING 1",
            (run_id, holder, self.me),
        )
        return len(rows)

    def release_run(self, run_id: str) -> None:
        self.run("DELETE FROM attribute_locks WHERE run_id=%s", (run_id,))

    def abandon(self, server_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        rows = self.rows(
            "DELETE FROM attribute_locks WHERE server_id = ANY(%s)"
            " RETURNING run_id, lock_key, holder",
            (list(server_ids),),
        )
        return sorted((str(r[0]), str(r[1]), str(r[2])) for r in rows)


class PgRpcCalls(_Repo):
    def add(
        self, call_id: str, flow_type: str, timeout_s: float, request: bytes, now: float
    ) -> None:
        self.run(
            "INSERT INTO rpc_calls (call_id, flow_type, caller, created_at, timeout_s, request)"
            " VALUES (%s,%s,%s,%s,%s,%s)",
            (call_id, flow_type, self.me, now, timeout_s, request),
        )

    def claim(self, flow_types: Sequence[str], limit: int) -> list[tuple[str, bytes]]:
        rows = self.rows(
            "UPDATE rpc_calls r SET claimed_by=%s FROM (SELECT call_id FROM rpc_calls WHERE"
            " claimed_by IS NULL AND flow_type = ANY(%s) ORDER BY created_at LIMIT %s FOR"
            " UPDATE SKIP LOCKED) c WHERE r.call_id=c.call_id RETURNING r.call_id, r.request",
            (self.me, list(flow_types), limit),
        )
        return [(str(r[0]), _b(r[1])) for r in rows]

    def finish(self, call_id: str, result: bytes) -> None:
        self.run("UPDATE rpc_calls SET result=%s WHERE call_id=%s", (result, call_id))

    def state(self, call_id: str) -> tuple[bool, bytes | None] | None:
        row = self.row("SELECT claimed_by, result FROM rpc_calls WHERE call_id=%s", (call_id,))
        if row is None:
            return None
        return row[0] is not None, _b(row[1]) if row[1] is not None else None

    def withdraw(self, call_id: str) -> bool:
        return bool(
            self.rows(
                "DELETE FROM rpc_calls WHERE call_id=%s AND claimed_by IS NULL RETURNING 1",
                (call_id,),
            )
        )

    def delete(self, call_id: str) -> None:
        self.run("DELETE FROM rpc_calls WHERE call_id=%s", (call_id,))

    def abandon(self, server_ids: Sequence[str]) -> None:
        ids = list(server_ids)
        self.run("DELETE FROM rpc_calls WHERE caller = ANY(%s)", (ids,))
        self.run(
            "UPDATE rpc_calls SET claimed_by=NULL WHERE claimed_by = ANY(%s) AND result IS NULL",
            (ids,),
        )


# first key of the Streams' advisory locks (the second is the Stream's name hashed)
_STREAM_LOCKS = 0x0D5E


class PgStreams(_Repo):
    def append(
        self, key: tuple[str, str, str], source: str, value: bytes, now: float, capacity: int
    ) -> int:
        # Sequence numbers come from one identity, drawn at INSERT: two servers' appends to
        # one Stream could commit out of order, and a reader that saw the later one would
        # resume past the earlier. Under the Stream's lock (held to COMMIT) they commit in
        # the order of their numbers.
        self.run("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_STREAM_LOCKS, "\t".join(key)))
        row = self.row(
            "INSERT INTO stream_messages (flow_type, stream, flow_id, source, created_at, value)"
            " VALUES (%s,%s,%s,%s,%s,%s) RETURNING seq",
            (*key, source, now, value),
        )
        self.run(
            "DELETE FROM stream_messages WHERE flow_type=%s AND stream=%s AND flow_id=%s AND"
            " seq < (SELECT min(seq) FROM (SELECT seq, sum(octet_length(value)) OVER (ORDER BY"
            " seq DESC) AS acc FROM stream_messages WHERE flow_type=%s AND stream=%s AND"
            " flow_id=%s) t WHERE acc<=%s)",
            (*key, *key, capacity),
        )
        assert row is not None and isinstance(row[0], int)
        return row[0]

    def after(
        self, key: tuple[str, str, str], seq: int, limit: int
    ) -> list[tuple[int, float, str, bytes]]:
        rows = self.rows(
            "SELECT seq, created_at, source, value FROM stream_messages WHERE flow_type=%s AND"
            " stream=%s AND flow_id=%s AND seq>%s ORDER BY seq LIMIT %s",
            (*key, seq, limit),
        )
        return [_stream_row(r) for r in rows]

    def before(
        self, key: tuple[str, str, str], seq: int | None, limit: int
    ) -> list[tuple[int, float, str, bytes]]:
        rows = self.rows(
            "SELECT seq, created_at, source, value FROM stream_messages WHERE flow_type=%s AND"
            " stream=%s AND flow_id=%s AND seq<%s ORDER BY seq DESC LIMIT %s",
            (*key, seq if seq is not None else 2**62, limit),
        )
        return [_stream_row(r) for r in rows]

    def delete_flow(self, flow_type: str, flow_id: str) -> None:
        self.run(
            "DELETE FROM stream_messages WHERE flow_type=%s AND flow_id=%s", (flow_type, flow_id)
        )


def _stream_row(r: tuple[object, ...]) -> tuple[int, float, str, bytes]:
    return (int(r[0]), float(r[1]), str(r[2]), _b(r[3]))  # type: ignore[call-overload,arg-type]
