"""Client CPU per statement of a Step-shaped PostgreSQL transaction: psycopg against bare libpq.

    uv run python bench/pg_statements.py [--database-url URL] [--steps 2000] [--rounds 5]

A Step result on PostgreSQL costs the server mostly its statements' client-side work.
This bench measures that work two ways: through psycopg's cursors in pipeline mode, and
through libpq's own pipeline (``psycopg.pq``, the thin wrapper psycopg is built on) with
no cursor, adaptation or per-statement flush, the way the store's writer sends its
transactions (``dex_server.store.postgres._pipeline``; psycopg covers the rest).

One "Step" is the transaction shape of a Step result (see ``dex_server.store.postgres``):
``BEGIN``; read a Flow row ``FOR UPDATE`` and an execution row; write a history row, the
execution (an upsert) and the Flow row (``bytea`` payloads of a few hundred bytes); read a
task snapshot; ``COMMIT``. Each way runs ``--steps`` such transactions per round on temporary
tables, the two ways alternating round by round; the figure is the process CPU time
(user and system, so the socket calls count) per statement, the median over the rounds.

- ``psycopg``: ``psycopg.Connection.pipeline()``, ``prepare_threshold=1``, reused cursors;
  reads are fetched, writes are not (the store's way before its bare pipeline, and still
  its way for what that does not cover).
- ``libpq``: prepared statements sent with ``PGconn.send_query_prepared``; one flush to
  read the two rows, one ``pipeline_sync`` for the rest; results read with
  ``consume_input`` / ``get_result``, the rows decoded from the binary format.

Both read back the values they wrote and fail if they differ. ``URL`` defaults to
``postgresql://postgres@127.0.0.1:5432/postgres``. The last line is::

    pg_statements psycopg_us=... libpq_us=... ratio=... statements_per_step=8 steps=...
"""

from __future__ import annotations

import argparse
import select
import statistics
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
from dex_server.store.postgres._pipeline import dollars
from psycopg import pq
from psycopg.pq.abc import PGresult

_DDL = (
    "CREATE TEMP TABLE b_flows (run_id text PRIMARY KEY, data bytea NOT NULL)",
    "CREATE TEMP TABLE b_execs (run_id text, execution_id text, data bytea NOT NULL,"
    " PRIMARY KEY (run_id, execution_id))",
    "CREATE TEMP TABLE b_history (run_id text, event_id bigint, payload bytea NOT NULL,"
    " PRIMARY KEY (run_id, event_id))",
    "CREATE TEMP TABLE b_attrs (run_id text, name text, value bytea, PRIMARY KEY (run_id, name))",
)
# psycopg's placeholders; the libpq way prepares them as $1, $2, ... (``dollars``)
_SQL: dict[str, str] = {
    "flow": "SELECT data FROM b_flows WHERE run_id=%s FOR UPDATE",
    "exec": "SELECT data FROM b_execs WHERE run_id=%s AND execution_id=%s",
    "history": "INSERT INTO b_history (run_id, event_id, payload) VALUES (%s,%s,%s)",
    "put": (
        "INSERT INTO b_execs (run_id, execution_id, data) VALUES (%s,%s,%s)"
        " ON CONFLICT (run_id, execution_id) DO UPDATE SET data=excluded.data"
    ),
    "update": "UPDATE b_flows SET data=%s WHERE run_id=%s",
    "snapshot": "SELECT name, value FROM b_attrs WHERE run_id=%s",
}
STATEMENTS_PER_STEP = 8  # BEGIN, the six above, COMMIT
_RUN = "run-1"


def _payload(step: int) -> bytes:
    return (f"step {step} ".encode() * 40)[:320]


def _setup(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    for ddl in _DDL:
        conn.execute(ddl)
    conn.execute("INSERT INTO b_flows VALUES (%s, %s)", (_RUN, _payload(-1)))
    conn.execute("INSERT INTO b_execs VALUES (%s, %s, %s)", (_RUN, "e-0", _payload(-1)))
    conn.execute("INSERT INTO b_attrs VALUES (%s, 'status', %s)", (_RUN, b"idle"))


def psycopg_steps(conn: psycopg.Connection[tuple[Any, ...]], first: int, steps: int) -> None:
    """``steps`` Step transactions the way the store sends them."""
    with conn.pipeline():
        reads, pair, writes, later = conn.cursor(), conn.cursor(), conn.cursor(), conn.cursor()
        for step in range(first, first + steps):
            writes.execute("BEGIN")
            flow_cur = reads.execute(_SQL["flow"], (_RUN,))
            exec_cur = pair.execute(_SQL["exec"], (_RUN, f"e-{step}"))
            flow, e = flow_cur.fetchone(), exec_cur.fetchone()
            if flow is None or e is None or bytes(e[0]) != _payload(step - 1):
                raise SystemExit(f"psycopg: step {step} read {flow!r}, {e!r}")
            writes.execute(_SQL["history"], (_RUN, step, _payload(step)))
            writes.execute(_SQL["put"], (_RUN, f"e-{step + 1}", _payload(step)))
            writes.execute(_SQL["update"], (_payload(step), _RUN))
            later.execute(_SQL["snapshot"], (_RUN,))
            writes.execute("COMMIT")
            if later.fetchall() != [("status", b"idle")]:
                raise SystemExit(f"psycopg: step {step} read a wrong snapshot")


class _Pipeline:
    """A bare libpq pipeline on a connection psycopg opened (and no longer uses meanwhile)."""

    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self.pg = conn.pgconn
        for name, sql in _SQL.items():
            res = self.pg.prepare(name.encode(), dollars(sql).encode())
            if res.status != pq.ExecStatus.COMMAND_OK:
                raise SystemExit(f"prepare {name}: {res.error_message.decode()}")
        for name, sql in (("begin", "BEGIN"), ("commit", "COMMIT")):
            res = self.pg.prepare(name.encode(), sql.encode())
            if res.status != pq.ExecStatus.COMMAND_OK:
                raise SystemExit(f"prepare {name}: {res.error_message.decode()}")
        self.pg.nonblocking = 1
        self.pg.enter_pipeline_mode()

    def close(self) -> None:
        self.pg.exit_pipeline_mode()
        self.pg.nonblocking = 0

    def send(self, name: str, params: list[bytes | None], binary: list[int]) -> None:
        self.pg.send_query_prepared(name.encode(), params, param_formats=binary, result_format=1)

    def flush(self) -> None:
        while self.pg.flush() == 1:
            select.select([self.pg.socket], [self.pg.socket], [])

    def results(self, count: int) -> list[PGresult]:
        """The next ``count`` results (one per statement; a sync's result counts as one)."""
        out: list[PGresult] = []
        while len(out) < count:
            self.pg.consume_input()
            while len(out) < count and not self.pg.is_busy():
                res = self.pg.get_result()
                if res is None:
                    continue  # the end of one statement's results
                if res.status in (pq.ExecStatus.FATAL_ERROR, pq.ExecStatus.PIPELINE_ABORTED):
                    raise SystemExit(f"libpq: {res.error_message.decode()}")
                out.append(res)
            if len(out) < count:
                select.select([self.pg.socket], [], [])
        return out


def libpq_steps(pipe: _Pipeline, first: int, steps: int) -> None:
    """The same transactions through the bare pipeline: two trips to the server each."""
    run = _RUN.encode()
    for step in range(first, first + steps):
        pipe.send("begin", [], [])
        pipe.send("flow", [run], [0])
        pipe.send("exec", [run, f"e-{step}".encode()], [0, 0])
        pipe.pg.send_flush_request()
        pipe.flush()
        _, flow, e = pipe.results(3)
        if flow.ntuples != 1 or e.ntuples != 1 or e.get_value(0, 0) != _payload(step - 1):
            raise SystemExit(f"libpq: step {step} read the wrong rows")
        payload = _payload(step)
        pipe.send("history", [run, str(step).encode(), payload], [0, 0, 1])
        pipe.send("put", [run, f"e-{step + 1}".encode(), payload], [0, 0, 1])
        pipe.send("update", [payload, run], [1, 0])
        pipe.send("snapshot", [run], [0])
        pipe.send("commit", [], [])
        pipe.pg.pipeline_sync()
        pipe.flush()
        res = pipe.results(6)
        snap = res[3]
        if snap.ntuples != 1 or snap.get_value(0, 1) != b"idle":
            raise SystemExit(f"libpq: step {step} read a wrong snapshot")
        if res[5].status != pq.ExecStatus.PIPELINE_SYNC:
            raise SystemExit(f"libpq: step {step} ended without its sync")


def cpu_us_per_statement(work: Callable[[int, int], None], first: int, steps: int) -> float:
    """CPU time per statement of ``work(first, steps)``, in microseconds."""
    start = time.process_time()
    work(first, steps)
    return (time.process_time() - start) / (steps * STATEMENTS_PER_STEP) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description="psycopg against bare libpq, per statement")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--steps", type=int, default=2000, help="transactions per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ours: list[float] = []
    floor: list[float] = []
    with (
        psycopg.connect(args.database_url, autocommit=True, prepare_threshold=1) as a,
        psycopg.connect(args.database_url, autocommit=True) as b,
    ):
        _setup(a)
        _setup(b)
        pipe = _Pipeline(b)
        psycopg_steps(a, 0, 50)  # warm: statements prepared, caches filled
        libpq_steps(pipe, 0, 50)
        first = 50
        for r in range(args.rounds):
            ways: list[tuple[list[float], Callable[[int, int], None]]] = [
                (ours, partial(psycopg_steps, a)),
                (floor, partial(libpq_steps, pipe)),
            ]
            for out, way in ways if r % 2 == 0 else ways[::-1]:
                out.append(cpu_us_per_statement(way, first, args.steps))
            first += args.steps
            print(f"round {r + 1}: psycopg {ours[-1]:.1f} us, libpq {floor[-1]:.1f} us", flush=True)
        pipe.close()
    p, q = statistics.median(ours), statistics.median(floor)
    print(
        f"pg_statements psycopg_us={p:.1f} libpq_us={q:.1f} ratio={q / p:.3f}"
        f" statements_per_step={STATEMENTS_PER_STEP} steps={args.steps}"
    )


if __name__ == "__main__":
    main()
