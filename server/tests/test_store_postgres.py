"""The PostgreSQL dialect of the store: migrations, group commit, lost connections."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest
from dex._protocol import StepOptionsSpec
from dex_server.store import (
    ExecRecord,
    FlowRecord,
    SchemaBehindError,
    StoreUnavailableError,
    Tx,
)
from dex_server.store.postgres import PostgresStore, migrate

from tests._pg import db_url, needs_postgres

__all__ = ["db_url"]  # a fixture, used by name


pytestmark = needs_postgres


def _insert(i: int):  # type: ignore[no-untyped-def]
    return lambda tx: tx.flows.insert(
        FlowRecord(run_id=f"r{i:04}", flow_id=f"f{i}", flow_type="T", started_at=float(i))
    )


def _count(tx: Tx) -> int:
    return len(tx.flows.page(flow_type="T", status=None, limit=10_000, before_run_id=None))


def test_concurrent_migrations_apply_once(db_url: str) -> None:
    results: list[list[int]] = []
    errors: list[BaseException] = []

    def runner() -> None:
        try:
            results.append(migrate(db_url))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=runner) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # each migration applied exactly once, by whichever runner got the lock first
    assert len(results) == 4
    assert sorted(v for r in results for v in r) == list(range(1, 11))
    assert migrate(db_url) == []
    migrate(db_url, verify_only=True)
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (1,),
            (2,),
            (3,),
            (4,),
            (5,),
            (6,),
            (7,),
            (8,),
            (9,),
            (10,),
        ]


def test_verify_only_fails_on_a_database_behind(db_url: str) -> None:
    with pytest.raises(SchemaBehindError, match="never migrated"):
        migrate(db_url, verify_only=True)
    migrate(db_url)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM schema_version WHERE version=1")
    with pytest.raises(SchemaBehindError, match="0001_init"):
        migrate(db_url, verify_only=True)


async def test_group_commit_isolates_failing_jobs_and_survives_reopen(db_url: str) -> None:
    store = PostgresStore(db_url, fsync=False)
    store.open()
    await asyncio.gather(*(store.run(_insert(i)) for i in range(200)))
    assert store.jobs == 200 and store.batches < 200

    def boom(tx: Tx) -> None:
        tx.flows.insert(FlowRecord(run_id="x", flow_id="x", flow_type="T", started_at=0.0))
        raise ValueError("job fails alone")

    def duplicate(tx: Tx) -> None:  # a database error rolls back only this job
        tx.flows.insert(FlowRecord(run_id="r0000", flow_id="other", flow_type="T", started_at=0))

    futs = [store.submit(_insert(500)), store.submit(boom), store.submit(duplicate)]
    out = await asyncio.gather(*futs, return_exceptions=True)
    assert out[0] is True  # inserted
    assert isinstance(out[1], ValueError)
    assert isinstance(out[2], psycopg.errors.UniqueViolation)
    assert await store.read(_count) == 201
    await store.close()
    store2 = PostgresStore(db_url)
    store2.open()
    assert await store2.run(_count) == 201
    await store2.close()


async def test_a_killed_connection_fails_jobs_as_unavailable_then_reconnects(db_url: str) -> None:
    store = PostgresStore(db_url)
    store.open()
    await store.run(_insert(1))

    def stall_then_insert(tx: Tx) -> None:
        # this job is inside its transaction when the backend is terminated
        with psycopg.connect(db_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname ="
                " current_database() AND pid <> pg_backend_pid() AND application_name ="
                " 'dex-server'"
            )
        _insert(2)(tx)

    with pytest.raises(StoreUnavailableError):
        await store.run(stall_then_insert)
    await store.run(_insert(3))  # a new connection
    assert await store.run(_count) == 2
    await store.close()


async def test_every_change_of_a_claim_bumps_its_epoch_and_leases_use_the_database_clock(
    db_url: str,
) -> None:
    a = PostgresStore(db_url, fsync=False, server_id="a")
    b = PostgresStore(db_url, fsync=False, server_id="b")
    a.open()
    b.open()
    try:
        await a.run(_insert(1))
        rec = ExecRecord(
            run_id="r0001",
            execution_id="S-1",
            step_type="S",
            from_execution_id="__start__",
            phase="execute",
            options=StepOptionsSpec(),
            first_attempt_at=0.0,
        )
        await a.run(lambda tx: tx.executions.put(rec))

        def claim_of(tx: Tx) -> tuple[str | None, int]:
            e = tx.executions.get("r0001", "S-1")
            assert e is not None
            return e.claimed_by, e.claim_epoch

        assert await a.run(claim_of) == ("a", 1)
        # B takes A over: the claim and its epoch move on, and A learns it lost them
        assert await b.run(lambda tx: tx.claims.claim_from(["a"])) == [("r0001", "S-1")]
        assert await a.run(claim_of) == ("b", 2)
        assert await a.run(lambda tx: tx.claims.lost([("r0001", "S-1", 1)])) == [("r0001", "S-1")]
        assert await b.run(lambda tx: tx.claims.lost([("r0001", "S-1", 2)])) == []

        # a job of A that makes it ready again claims it back, at a new epoch
        def put_again(tx: Tx) -> None:
            e = tx.executions.get("r0001", "S-1")
            assert e is not None
            tx.executions.put(e)

        await a.run(put_again)
        assert await b.run(claim_of) == ("a", 3)

        # heartbeats are the database's time: a lease is judged by it alone
        with psycopg.connect(db_url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT heartbeat_at - extract(epoch FROM clock_timestamp())::float8"
                " FROM servers WHERE server_id='a'"
            ).fetchone()
            assert row is not None and abs(row[0]) < 5.0
            assert await b.run(lambda tx: tx.servers.dead(15.0)) == []
            admin.execute("UPDATE servers SET heartbeat_at = heartbeat_at - 20 WHERE server_id='a'")
        assert await b.run(lambda tx: tx.servers.dead(15.0)) == ["a"]
    finally:
        await a.close()
        await b.close()
