"""SQLite repositories for the multi-server aggregates (one server per file)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence

from dex_server.store.sqlite._repos import _marks


class SqliteClaims:
    """Claims on a store only one server uses: every claim but this server's is stale."""

    def __init__(self, conn: sqlite3.Connection, server_id: str) -> None:
        self.c = conn
        self.me = server_id

    def release(
        self, run_id: str, execution_id: str, now: float, start_by: float | None = None
    ) -> None:
        self.c.execute(
            "UPDATE executions SET claimed_by=NULL, claim_epoch=claim_epoch+1, released_at=?,"
            " start_by=? WHERE run_id=? AND execution_id=? AND claimed_by=?",
            (now, start_by, run_id, execution_id, self.me),
        )

    def _claim(self, where: str, args: Sequence[object]) -> list[tuple[str, str]]:
        rows = self.c.execute(
            "UPDATE executions SET claimed_by=?, claim_epoch=claim_epoch+1, released_at=NULL"
            f" WHERE {where}"
            " RETURNING run_id, execution_id",
            (self.me, *args),
        ).fetchall()
        return sorted((r[0], r[1]) for r in rows)

    def claim_pool(
        self, flow_types: Sequence[str], now: float, limit: int
    ) -> list[tuple[str, str]]:
        if not flow_types:
            return []
        return self._claim(
            "(run_id, execution_id) IN (SELECT x.run_id, x.execution_id FROM executions x"
            " JOIN flows f ON f.run_id=x.run_id WHERE x.claimed_by IS NULL AND x.ready_at"
            f" IS NOT NULL AND x.ready_at<=? AND f.flow_type IN ({_marks(len(flow_types))})"
            " ORDER BY x.ready_at LIMIT ?)",
            (now, *flow_types, limit),
        )

    def claim_unserved(self, now: float, limit: int) -> list[tuple[str, str]]:
        return self._claim(
            "(run_id, execution_id) IN (SELECT run_id, execution_id FROM executions WHERE"
            " claimed_by IS NULL AND ready_at IS NOT NULL AND start_by<=? LIMIT ?)",
            (now, limit),
        )

    def claim_from(self, server_ids: Sequence[str]) -> list[tuple[str, str]]:
        # one server per SQLite file: whatever no live process holds is this server's
        return self._claim(
            "ready_at IS NOT NULL AND (claimed_by IS NULL OR claimed_by<>?)", (self.me,)
        )

    def mine_ready(self, now: float) -> list[tuple[str, str]]:
        rows = self.c.execute(
            "SELECT run_id, execution_id FROM executions WHERE claimed_by=? AND ready_at<=?",
            (self.me, now),
        )
        return [(r[0], r[1]) for r in rows]

    def lost(self, held: Sequence[tuple[str, str, int]]) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        for run_id, eid, epoch in held:
            row = self.c.execute(
                "SELECT 1 FROM executions WHERE run_id=? AND execution_id=? AND"
                " (claimed_by IS NOT ? OR claim_epoch<>?)",
                (run_id, eid, self.me, epoch),
            ).fetchone()
            if row is not None:
                out.append((run_id, eid))
        return sorted(out)


class SqliteServers:
    def __init__(self, conn: sqlite3.Connection, server_id: str) -> None:
        self.c = conn
        self.me = server_id

    def dead(self, lease_s: float) -> list[str]:
        # only this process uses the file, so any other server is gone; the sentinel ""
        # stands for claims written before servers were recorded (or by a lost process)
        rows = self.c.execute(
            "SELECT DISTINCT claimed_by FROM executions WHERE claimed_by IS NOT NULL AND"
            " claimed_by<>? UNION SELECT server_id FROM servers WHERE server_id<>?",
            (self.me, self.me),
        ).fetchall()
        found = [r[0] for r in rows]
        if (
            not found
            and self.c.execute(
                "SELECT 1 FROM executions WHERE claimed_by IS NULL AND ready_at IS NOT NULL LIMIT 1"
            ).fetchone()
        ):
            found = [""]
        return found

    def remove(self, server_ids: Sequence[str]) -> None:
        self.c.executemany("DELETE FROM servers WHERE server_id=?", [(s,) for s in server_ids])


class SqliteSignals:
    def notify(self, kind: str, data: str) -> None:
        """One server per SQLite file: nobody else to tell."""


class SqliteRpcCalls:
    """Never used with one server; kept so every store has the same tables and contract."""

    def __init__(self, conn: sqlite3.Connection, server_id: str) -> None:
        self.c = conn
        self.me = server_id

    def add(
        self, call_id: str, flow_type: str, timeout_s: float, request: bytes, now: float
    ) -> None:
        self.c.execute(
            "INSERT INTO rpc_calls (call_id, flow_type, caller, created_at, timeout_s, request)"
            " VALUES (?,?,?,?,?,?)",
            (call_id, flow_type, self.me, now, timeout_s, request),
        )

    def claim(self, flow_types: Sequence[str], limit: int) -> list[tuple[str, bytes]]:
        if not flow_types:
            return []
        rows = self.c.execute(
            "UPDATE rpc_calls SET claimed_by=? WHERE call_id IN (SELECT call_id FROM rpc_calls"
            f" WHERE claimed_by IS NULL AND flow_type IN ({_marks(len(flow_types))})"
            " ORDER BY created_at LIMIT ?) RETURNING call_id, request",
            (self.me, *flow_types, limit),
        ).fetchall()
        return [(r[0], bytes(r[1])) for r in rows]

    def finish(self, call_id: str, result: bytes) -> None:
        self.c.execute("UPDATE rpc_calls SET result=? WHERE call_id=?", (result, call_id))

    def state(self, call_id: str) -> tuple[bool, bytes | None] | None:
        row = self.c.execute(
            "SELECT claimed_by, result FROM rpc_calls WHERE call_id=?", (call_id,)
        ).fetchone()
        if row is None:
            return None
        return row[0] is not None, bytes(row[1]) if row[1] is not None else None

    def withdraw(self, call_id: str) -> bool:
        cur = self.c.execute(
            "DELETE FROM rpc_calls WHERE call_id=? AND claimed_by IS NULL", (call_id,)
        )
        return cur.rowcount > 0

    def delete(self, call_id: str) -> None:
        self.c.execute("DELETE FROM rpc_calls WHERE call_id=?", (call_id,))

    def abandon(self, server_ids: Sequence[str]) -> None:
        for sid in server_ids:
            self.c.execute("DELETE FROM rpc_calls WHERE caller=?", (sid,))
            self.c.execute(
                "UPDATE rpc_calls SET claimed_by=NULL WHERE claimed_by=? AND result IS NULL",
                (sid,),
            )


class SqliteLocks:
    """One server per file keeps its locks in memory; kept so every store has the contract."""

    def __init__(self, conn: sqlite3.Connection, server_id: str) -> None:
        self.c = conn
        self.me = server_id

    def held(self, run_id: str, keys: Sequence[str], holder: str) -> list[tuple[str, str]]:
        rows = self.c.execute(
            "SELECT lock_key, holder FROM attribute_locks WHERE run_id=? AND"
            f" lock_key IN ({_marks(len(keys))}) AND holder<>?",
            (run_id, *keys, holder),
        ).fetchall()
        return [(r[0], r[1]) for r in rows]

    def take(self, run_id: str, keys: Sequence[str], holder: str) -> None:
        self.c.executemany(
            "INSERT INTO attribute_locks (run_id, lock_key, holder, server_id) VALUES"
            " (?,?,?,?) ON CONFLICT (run_id, lock_key) DO UPDATE SET holder=excluded.holder,"
            " server_id=excluded.server_id",
            [(run_id, k, holder, self.me) for k in keys],
        )

    def mine(self, run_id: str, holder: str) -> list[str]:
        rows = self.c.execute(
            "SELECT lock_key FROM attribute_locks WHERE run_id=? AND holder=? AND server_id=?",
            (run_id, holder, self.me),
        ).fetchall()
        return sorted(r[0] for r in rows)

    def drop(self, run_id: str, key: str) -> None:
        self.c.execute("DELETE FROM attribute_locks WHERE run_id=? AND lock_key=?", (run_id, key))

    def release(self, run_id: str, holder: str) -> int:
        cur = self.c.execute(
            "DELETE FROM attribute_locks WHERE run_id=? AND holder=? AND server_id=?",
            (run_id, holder, self.me),
        )
        return cur.rowcount

    def release_run(self, run_id: str) -> None:
        self.c.execute("DELETE FROM attribute_locks WHERE run_id=?", (run_id,))

    def abandon(self, server_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        out: list[tuple[str, str, str]] = []
        for sid in server_ids:
            rows = self.c.execute(
                "DELETE FROM attribute_locks WHERE server_id=? RETURNING run_id, lock_key, holder",
                (sid,),
            ).fetchall()
            out.extend((r[0], r[1], r[2]) for r in rows)
        return sorted(out)


class SqliteStreams:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.c = conn

    def append(
        self, key: tuple[str, str, str], source: str, value: bytes, now: float, capacity: int
    ) -> int:
        row = self.c.execute(
            "INSERT INTO stream_messages (flow_type, stream, flow_id, source, created_at, value)"
            " VALUES (?,?,?,?,?,?) RETURNING seq",
            (*key, source, now, value),
        ).fetchone()
        self.c.execute(
            "DELETE FROM stream_messages WHERE flow_type=? AND stream=? AND flow_id=? AND seq<"
            " (SELECT min(seq) FROM (SELECT seq, sum(length(value)) OVER (ORDER BY seq DESC)"
            " AS acc FROM stream_messages WHERE flow_type=? AND stream=? AND flow_id=?)"
            " WHERE acc<=?)",
            (*key, *key, capacity),
        )
        return int(row[0])

    def after(
        self, key: tuple[str, str, str], seq: int, limit: int
    ) -> list[tuple[int, float, str, bytes]]:
        rows = self.c.execute(
            "SELECT seq, created_at, source, value FROM stream_messages WHERE flow_type=? AND"
            " stream=? AND flow_id=? AND seq>? ORDER BY seq LIMIT ?",
            (*key, seq, limit),
        )
        return [(r[0], r[1], r[2], bytes(r[3])) for r in rows]

    def before(
        self, key: tuple[str, str, str], seq: int | None, limit: int
    ) -> list[tuple[int, float, str, bytes]]:
        rows = self.c.execute(
            "SELECT seq, created_at, source, value FROM stream_messages WHERE flow_type=? AND"
            " stream=? AND flow_id=? AND seq<? ORDER BY seq DESC LIMIT ?",
            (*key, seq if seq is not None else 2**62, limit),
        )
        return [(r[0], r[1], r[2], bytes(r[3])) for r in rows]

    def delete_flow(self, flow_type: str, flow_id: str) -> None:
        self.c.execute(
            "DELETE FROM stream_messages WHERE flow_type=? AND flow_id=?", (flow_type, flow_id)
        )
