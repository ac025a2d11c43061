"""SubFlow wake-ups as store jobs: a child's close writes the parent's wake-up Timer row,
and firing it only re-runs matching (on a real SQLite store, or on PostgreSQL with
``DEX_TEST_DATABASE=postgres``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest_asyncio
from dex._protocol import CompletionWire, ConditionSpec, StepOptionsSpec, WaitSpec
from dex_server.service._common import Effects, Limits, Specs
from dex_server.service._flowops import close_flow, finish
from dex_server.service._steps import fire_timer
from dex_server.store import ExecRecord, FlowRecord, Store, Tx
from dex_server.store.sqlite import SqliteStore
from dex_server.testing import create_test_database, drop_test_database, selected_database

LIMITS = Limits(
    blob_threshold_bytes=1 << 20,
    max_value_bytes=1 << 20,
    max_flow_state_bytes=1 << 24,
    max_request_bytes=1 << 24,
    retention_s=3600.0,
)
WAKE = "subflow-wake:S-1"


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    if selected_database() != "postgres":
        lite = SqliteStore(tmp_path / "db")
        lite.open()
        yield lite
        await lite.close()
        return
    from dex_server.store.postgres import PostgresStore

    url = create_test_database()
    pg = PostgresStore(url, fsync=False)
    pg.open()
    try:
        yield pg
    finally:
        await pg.close()
        drop_test_database(url)


def parent_with(tx: Tx, e: ExecRecord) -> None:
    tx.flows.insert(FlowRecord(run_id="p", flow_id="P", flow_type="T", started_at=0.0))
    tx.executions.put(e)


def execution(**fields: object) -> ExecRecord:
    return ExecRecord(
        run_id="p",
        execution_id="S-1",
        step_type="S",
        from_execution_id="__start__",
        options=StepOptionsSpec(),
        first_attempt_at=0.0,
        **fields,  # type: ignore[arg-type]
    )


async def test_a_closing_child_wakes_its_waiting_parent(store: Store) -> None:
    wait = WaitSpec(
        conditions=[ConditionSpec(kind="subflow", flow_id="SubFlow:P-S-1-0", run_id="c")]
    )
    child = FlowRecord(
        run_id="c",
        flow_id="SubFlow:P-S-1-0",
        flow_type="K",
        started_at=0.0,
        parent_flow_id="P",
        subflow_waiters=[("p", "S-1")],
        completions=[
            CompletionWire(step_type="K", step_execution_id="K-1", output=msgspec.Raw(b"7"))
        ],
    )

    def setup(tx: Tx) -> None:
        parent_with(tx, execution(phase="waiting", wait=wait, wait_seq=1))
        tx.flows.insert(child)

    def close(tx: Tx) -> Effects:
        eff = Effects()
        rec = tx.flows.get("c")
        assert rec is not None
        close_flow(tx, LIMITS, rec, "completed", 5.0, eff)
        finish(tx, rec, eff)
        return eff

    await store.run(setup)
    closed = await store.run(close)
    assert closed.timers == [(5.0, "p", WAKE)]
    stored = await store.run(lambda tx: tx.flows.get("c"))
    assert stored is not None and stored.subflow_waiters == []
    assert stored.parent_flow_id == "P"

    woken = await store.run(lambda tx: fire_timer(tx, LIMITS, Specs(), "p", WAKE, 5.0, 5.5))
    e = await store.run(lambda tx: tx.executions.get("p", "S-1"))
    assert e is not None and e.phase == "execute" and e.condition_results is not None
    [got] = e.condition_results.subflows
    assert (got.flow_id, got.run_id, got.result.status) == ("SubFlow:P-S-1-0", "c", "completed")
    assert bytes(got.result.completions[0].output or b"") == b"7"
    assert [r.execution_id for r in woken.ready] == ["S-1"]


async def test_a_wake_up_never_queues_an_execution_that_is_not_waiting(store: Store) -> None:
    def setup(tx: Tx) -> None:
        # the Timer of an any_of won: the execution is running execute when the child ends
        parent_with(tx, execution(phase="execute"))
        tx.timers.add("p", WAKE, 5.0)
        tx.timers.add("p", "S-1", 6.0)

    await store.run(setup)
    woken = await store.run(lambda tx: fire_timer(tx, LIMITS, Specs(), "p", WAKE, 5.0, 7.0))
    assert woken.ready == []
    # a plain Timer row of the same execution would queue it again (hence the prefix)
    plain = await store.run(lambda tx: fire_timer(tx, LIMITS, Specs(), "p", "S-1", 6.0, 7.0))
    assert [r.execution_id for r in plain.ready] == ["S-1"]
