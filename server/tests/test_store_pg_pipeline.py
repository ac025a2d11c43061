"""The PostgreSQL writer's bare libpq pipeline: values, rows, errors and the way back."""

from __future__ import annotations

import asyncio
import math
from decimal import Decimal
from functools import partial

import dex
import psycopg
import pytest
from dex_server.app import ServerConfig
from dex_server.embedded import EmbeddedServer
from dex_server.service import Runtime
from dex_server.store import FlowRecord, StoredValue, Tx
from dex_server.store.postgres import PostgresStore
from dex_server.store.postgres._pipeline import Pipeline, Unsupported, dollars

from tests._pg import db_url, needs_postgres, until

__all__ = ["db_url"]  # a fixture, used by name

pytestmark = needs_postgres

_VALUES: list[tuple[object, ...]] = [
    (1, "plain", b"\x00\x01bytes\xff", 2**62, 0.1 + 0.2, True, ["a", 'q"uote', "back\\slash"]),
    (2, "ünï 'côdé' %s", b"", -(2**31), -1e-300, False, []),
    (3, None, None, None, None, None, None),
    (4, "", b"x" * 70_000, 0, math.pi, True, ["", "{brace}", "com,ma", "NULL"]),
]


def _table(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    conn.execute(
        "CREATE TABLE kinds (id int PRIMARY KEY, t text, b bytea, i bigint,"
        " f double precision, ok boolean, names text[])"
    )


def test_placeholders_become_numbered_and_percent_signs_stay() -> None:
    assert dollars("SELECT %s, %s WHERE x LIKE 'a%%'") == "SELECT $1, $2 WHERE x LIKE 'a%'"
    with pytest.raises(Unsupported, match="%d"):
        dollars("SELECT %d")


def test_values_round_trip_as_psycopg_reads_them(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _table(conn)
        pipe = Pipeline(conn)
        pipe.begin()
        for row in _VALUES:
            pipe.run("INSERT INTO kinds VALUES (%s,%s,%s,%s,%s,%s,%s)", row)
        pipe.commit()
        assert not pipe.active
        # psycopg reads back exactly what went in (text[] as a list)
        assert conn.execute("SELECT * FROM kinds ORDER BY id").fetchall() == _VALUES
        pipe.begin()
        got = pipe.rows("SELECT id, t, b, i, f, ok FROM kinds ORDER BY id")
        by_id = pipe.rows("SELECT t FROM kinds WHERE id = ANY(%s)", ([2, 4],))
        by_names = pipe.rows("SELECT id FROM kinds WHERE names && %s", (['q"uote', "NULL"],))
        pipe.commit()
        assert got == [r[:-1] for r in _VALUES]
        assert sorted(r[0] for r in by_id) == ["", "ünï 'côdé' %s"]
        assert sorted(r[0] for r in by_names) == [1, 4]


def test_unsupported_values_and_columns_are_refused(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _table(conn)
        pipe = Pipeline(conn)
        pipe.begin()
        with pytest.raises(Unsupported, match="dict"):
            pipe.run("INSERT INTO kinds (id, t) VALUES (%s,%s)", (9, {"no": "dicts"}))
        with pytest.raises(Unsupported, match="OID 1700"):
            pipe.rows("SELECT 1.5::numeric")
        pipe.abort()
        conn.execute("ROLLBACK")
        for _ in range(2):  # refused each time, never kept as if it had been prepared
            pipe.begin()
            with pytest.raises(Unsupported, match="%d"):
                pipe.run("SELECT %d", ())
            pipe.abort()
            conn.execute("ROLLBACK")
        assert conn.execute("SELECT count(*) FROM kinds").fetchone() == (0,)


def test_a_refused_statement_raises_its_psycopg_error_and_the_connection_stays_usable(
    db_url: str,
) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _table(conn)
        pipe = Pipeline(conn)
        pipe.begin()
        pipe.run("INSERT INTO kinds (id) VALUES (%s)", (1,))
        pipe.run("INSERT INTO kinds (id) VALUES (%s)", (1,))
        with pytest.raises(psycopg.errors.UniqueViolation):
            pipe.rows("SELECT id FROM kinds")
        pipe.abort()
        conn.execute("ROLLBACK")
        pipe.begin()
        pipe.run("INSERT INTO kinds (id) VALUES (%s)", (2,))
        pipe.commit()
        assert conn.execute("SELECT id FROM kinds").fetchall() == [(2,)]


def test_statements_deallocated_under_it_are_prepared_again(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        _table(conn)
        pipe = Pipeline(conn)
        pipe.begin()
        assert pipe.rows("SELECT count(*) FROM kinds WHERE id > %s", (0,)) == [(0,)]
        pipe.commit()
        conn.execute("DEALLOCATE ALL")
        pipe.begin()
        with pytest.raises(psycopg.errors.InvalidSqlStatementName):
            pipe.rows("SELECT count(*) FROM kinds WHERE id > %s", (0,))
        pipe.abort()
        conn.execute("ROLLBACK")
        pipe.begin()  # the same statement, prepared again under a new name
        assert pipe.rows("SELECT count(*) FROM kinds WHERE id > %s", (0,)) == [(0,)]
        pipe.commit()


async def test_the_store_commits_through_the_pipeline_and_hands_psycopg_what_it_lacks(
    db_url: str,
) -> None:
    store = PostgresStore(db_url, fsync=False)
    store.open()
    try:

        def start(tx: Tx) -> bool:
            flow = FlowRecord(run_id="r1", flow_id="f1", flow_type="T", started_at=1.0)
            return tx.flows.insert(flow)

        assert await store.run(start) is True
        assert store.bare_batches >= 1 and store.bare_fallbacks == 0

        def write(tx: Tx) -> int:
            value = StoredValue(value=None, blob=None, size=3)
            return tx.state.write_many("r1", [("a", value)], {})

        assert await store.run(write) == 3
        before = store.bare_batches

        def odd_write(tx: Tx) -> None:
            # a Decimal: psycopg adapts it, the pipeline does not: the group goes to psycopg
            tx.history.append("r1", 1, 1.0, "Odd", b"{}")
            tx.timers.add("r1", "e-1", Decimal("2.5"))  # type: ignore[arg-type]

        await store.run(odd_write)
        assert store.bare_fallbacks == 1 and store.bare_batches == before

        def read(tx: Tx) -> tuple[object, ...]:
            return (
                tx.history.page("r1", 0, 10)[0][2],
                tx.timers.due_before(10.0, 10),
                tx.state.sizes_of("r1", ["a"]),
            )

        assert await store.read(read) == ("Odd", [(2.5, "r1", "e-1")], {"a": 3})
    finally:
        await store.close()


async def test_many_jobs_in_one_group_keep_their_order(db_url: str) -> None:
    store = PostgresStore(db_url, fsync=False)
    store.open()
    try:

        def append(i: int):  # type: ignore[no-untyped-def]
            return lambda tx: tx.history.append("r", i, float(i), "E", f"{i}".encode())

        await asyncio.gather(*(store.run(append(i)) for i in range(300)))
        assert store.bare_fallbacks == 0
        rows = await store.read(lambda tx: tx.history.page("r", -1, 1000))
        assert [(r[0], r[3]) for r in rows] == [(i, f"{i}".encode()) for i in range(300)]
    finally:
        await store.close()


COUNT = dex.Attribute("count", int)


class Bump(dex.Step[int]):
    """Adds its input to ``count``, three times, then waits (for an RPC) an hour."""

    async def execute(self, ctx: dex.Context, value: int) -> dex.StepDecision:
        COUNT.set(ctx, (COUNT.get(ctx) or 0) + value)
        if value >= 3:
            return dex.StepDecision.go_to(Idle, None)
        return dex.StepDecision.go_to(Bump, value + 1)


class Idle(dex.Step[None]):
    async def wait_for(self, ctx: dex.Context, input: None) -> dex.Wait:
        return dex.Wait.until(dex.Timer.by_duration(3600))

    async def execute(self, ctx: dex.Context, input: None) -> dex.StepDecision:
        return dex.StepDecision.graceful_complete(None)


class Counter(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Bump()).other_steps(Idle())

    def get_persistence_schema(self) -> dex.PersistenceSchema:
        return dex.PersistenceSchema.of(COUNT)

    @dex.rpc(is_transactional=True)
    def add(self, context: dex.Context, input: int) -> int:
        value = (COUNT.get(context) or 0) + input
        COUNT.set(context, value)
        return value


async def test_a_flows_steps_rpcs_and_state_commit_through_the_pipeline(db_url: str) -> None:
    flow = Counter()
    registry = dex.Registry([flow], allow_async_handlers=True)
    config = ServerConfig(database_url=db_url, port=0, fsync=False)
    async with EmbeddedServer(config=config, name="pg-pipeline") as server:
        worker = dex.AsyncWorker(
            registry, None, dex.WorkerOptions(server_address=server.worker_address)
        )
        running = asyncio.create_task(worker.start())
        client = dex.AsyncClient(registry, None, dex.ClientOptions(server_address=server.address))
        try:
            await worker.wait_pull_registered(30)
            runtime: Runtime = server._server.config.app.state.runtime  # type: ignore[union-attr]
            store = runtime.store
            assert isinstance(store, PostgresStore)
            for i in range(5):
                await client.start_flow(flow, f"c{i}", 1)
            for fid in [f"c{i}" for i in range(5)]:
                # 1 + 2 + 3 from the Steps, once they ran (adding 0 reads the count)
                await until(partial(_added, client, flow, fid, 6), 60, f"{fid} counted to 6")
                assert await client.invoke_rpc(flow.add, fid, 10) == 16
            assert store.bare_batches > 0
            assert store.bare_fallbacks == 0
        finally:
            await client.close()
            await worker.stop()
            await running


async def _added(client: dex.AsyncClient, flow: Counter, flow_id: str, want: int) -> bool:
    return bool(await client.invoke_rpc(flow.add, flow_id, 0) == want)
