"""The reads and the Flow update every Step result commits with, on SQLite and PostgreSQL.

``flows.get_with_execution`` and ``state.snapshot`` must return exactly what the separate
reads return, and ``state.snapshot_later`` what ``snapshot`` would at that point of the
job; ``flows.update`` must keep the indexed columns right whether it changes them (a
close) or not (a Step of a running run).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest
from dex._protocol import StepOptionsSpec
from dex_server.service._common import Effects, ReadyTask
from dex_server.service._flowops import prebuild
from dex_server.store import ExecRecord, FlowRecord, SqliteStore, StoredValue, Tx
from dex_server.store._contract import Snapshot
from dex_server.store._records import Phase
from dex_server.store.postgres import PostgresStore

from tests._pg import db_url, postgres_reachable

__all__ = ["db_url"]  # a fixture, used by name

Store = SqliteStore | PostgresStore


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    s: Store
    if request.param == "sqlite":
        s = SqliteStore(tmp_path / "db")
    else:
        if not postgres_reachable():
            pytest.skip("PostgreSQL is not reachable")
        s = PostgresStore(request.getfixturevalue("db_url"))
    s.open()
    try:
        yield s
    finally:
        await s.close()


def _flow(run_id: str) -> FlowRecord:
    return FlowRecord(run_id=run_id, flow_id=f"f-{run_id}", flow_type="T", started_at=1.0)


def _exec(run_id: str, eid: str) -> ExecRecord:
    return ExecRecord(
        run_id=run_id,
        execution_id=eid,
        step_type="S",
        from_execution_id="__start__",
        phase="execute",
        options=StepOptionsSpec(),
        first_attempt_at=1.0,
        input=msgspec.Raw(b'{"n":1}'),
    )


async def test_flow_with_execution_matches_the_separate_reads(store: Store) -> None:
    def setup(tx: Tx) -> None:
        tx.flows.insert(_flow("r1"))
        tx.executions.put(_exec("r1", "S-1"))

    await store.run(setup)

    Pair = tuple[FlowRecord | None, ExecRecord | None]

    def read(tx: Tx) -> tuple[Pair, Pair, Pair, Pair]:
        return (
            tx.flows.get_with_execution("r1", "S-1"),
            (tx.flows.get("r1"), tx.executions.get("r1", "S-1")),
            tx.flows.get_with_execution("r1", "S-2"),
            tx.flows.get_with_execution("nope", "S-1"),
        )

    both, separate, no_exec, no_flow = await store.run(read)
    assert both == separate
    flow, e = both
    assert flow is not None and flow.run_id == "r1"
    assert e is not None and e.execution_id == "S-1" and e.input == msgspec.Raw(b'{"n":1}')
    assert no_exec == (flow, None)
    assert no_flow == (None, None)


async def test_snapshot_matches_singletons_and_channel_sizes(store: Store) -> None:
    def setup(tx: Tx) -> None:
        tx.flows.insert(_flow("r1"))
        for name, value in [("A", b"1"), ("B", b'"x"'), ("M/k1", b"2"), ("M/k2", b"3")]:
            tx.state.write("r1", name, StoredValue(value=msgspec.Raw(value), size=len(value)))
        tx.state.write("r1", "Big", StoredValue(blob="h" * 64, size=5000))
        for i, channel in enumerate(["C", "C", "D", "Q/k1"]):
            tx.channels.publish("r1", channel, f"m{i}", b"1")
        tx.state.write("r2", "Other", StoredValue(value=msgspec.Raw(b"9"), size=1))
        tx.channels.publish("r2", "C", "m9", b"1")

    await store.run(setup)

    def read(tx: Tx) -> tuple[Snapshot, Snapshot, Snapshot, Snapshot, Snapshot]:
        return (
            tx.state.snapshot("r1"),
            (tx.state.singletons("r1"), tx.channels.sizes("r1")),
            tx.state.snapshot("empty"),
            # with the run's type: the first read learns its maps, the second skips them
            tx.state.snapshot("r1", "T"),
            tx.state.snapshot("r1", "T"),
        )

    snap, separate, empty, first, learnt = await store.run(read)
    assert snap == separate == first == learnt
    values, sizes = snap
    assert sorted(values) == ["A", "B", "Big"]
    assert values["Big"].blob == "h" * 64 and values["A"].value == msgspec.Raw(b"1")
    assert sizes == {"C": 2, "D": 1, "Q/k1": 1}
    assert empty == ({}, {})
    # the reader's snapshot reads the same
    assert await store.read(lambda tx: tx.state.snapshot("r1")) == snap


async def test_waiting_reads_only_the_executions_in_the_waiting_phase(store: Store) -> None:
    def setup(tx: Tx) -> None:
        tx.flows.insert(_flow("r1"))
        phases: list[Phase] = ["execute", "waiting", "wait_for"]
        for n, phase in enumerate(phases, start=1):
            e = _exec("r1", f"S-{n}")
            e.phase = phase
            tx.executions.put(e)
        other = _exec("r2", "S-9")
        other.phase = "waiting"
        tx.executions.put(other)

    await store.run(setup)
    waiting = await store.run(lambda tx: tx.executions.waiting("r1"))
    assert [(e.execution_id, e.phase) for e in waiting] == [("S-2", "waiting")]
    assert await store.run(lambda tx: tx.executions.waiting("none")) == []


async def test_snapshot_later_sees_the_jobs_writes_before_the_result(store: Store) -> None:
    await store.run(lambda tx: tx.flows.insert(_flow("r1")))

    def job(tx: Tx) -> list[Snapshot | None]:
        got: list[Snapshot | None] = []
        tx.state.write("r1", "A", StoredValue(value=msgspec.Raw(b"1"), size=1))
        tx.state.snapshot_later("r1", got.append)
        # written after the snapshot's point: not in it
        tx.state.write("r1", "A", StoredValue(value=msgspec.Raw(b"2"), size=1))
        tx.channels.publish("r1", "C", "m1", b"1")
        return got

    got = await store.run(job)
    assert len(got) == 1 and got[0] is not None
    values, sizes = got[0]
    assert values["A"].value == msgspec.Raw(b"1") and sizes == {}
    _, sizes_now = await store.run(lambda tx: tx.state.snapshot("r1"))
    assert sizes_now == {"C": 1}


async def test_snapshot_later_of_a_group_that_fails_is_dropped(store: Store) -> None:
    """A failing job sends the group to the store's one-by-one retry: one fill per job."""
    await store.run(lambda tx: tx.flows.insert(_flow("r1")))
    fills: list[Snapshot | None] = []

    def ok(tx: Tx) -> None:
        tx.state.write("r1", "A", StoredValue(value=msgspec.Raw(b"1"), size=1))
        tx.state.snapshot_later("r1", fills.append)

    def boom(tx: Tx) -> None:
        tx.state.snapshot_later("r1", fills.append)
        raise ValueError("this job fails")

    first, second = store.submit(ok), store.submit(boom)
    await first
    with pytest.raises(ValueError, match="this job fails"):
        await second
    assert await store.run(lambda tx: tx.state.get("r1", "A")) is not None
    # the failing job's own read may have run (a read like any other, in the one-by-one
    # retry), but a dropped attempt's never does, not even with a later commit
    assert 1 <= len(fills) <= 2
    assert all(f is not None and f[0]["A"].value == msgspec.Raw(b"1") for f in fills)


async def test_the_tasks_one_job_makes_ready_share_one_snapshot_read(store: Store) -> None:
    """``prebuild`` reads the singletons and Channel sizes once for all its tasks."""

    def setup(tx: Tx) -> None:
        tx.flows.insert(_flow("r1"))
        tx.state.write("r1", "A", StoredValue(value=msgspec.Raw(b"1"), size=1))
        tx.channels.publish("r1", "C", "m1", b"1")

    await store.run(setup)
    ready = [
        ReadyTask(
            run_id="r1",
            flow_id="f-r1",
            flow_type="T",
            execution_id=f"S-{n}",
            kind="execute",
            attempt=1,
            locks=[],
            timeout_s=60.0,
            heartbeat_timeout_s=None,
            record=_exec("r1", f"S-{n}"),
        )
        for n in range(3)
    ]
    reads: list[str] = []

    def job(tx: Tx) -> None:
        flow = tx.flows.get("r1")
        assert flow is not None
        for r in ready:
            assert r.record is not None
            tx.executions.put(r.record)
        real = tx.state.snapshot_later

        def counted(
            run_id: str, fill: Callable[[Snapshot | None], None], flow_type: str = ""
        ) -> None:
            reads.append(run_id)
            real(run_id, fill, flow_type)

        tx.state.snapshot_later = counted  # type: ignore[method-assign]
        try:
            prebuild(tx, flow, Effects(ready=list(ready)))
        finally:
            tx.state.snapshot_later = real  # type: ignore[method-assign]

    await store.run(job)
    assert reads == ["r1"]
    for r in ready:
        assert r.task is not None and r.task.step_execution_id == r.execution_id
        assert r.task.attributes == {"A": msgspec.Raw(b"1")}
        assert r.task.channel_sizes == {"C": 1}


async def test_flow_update_keeps_the_indexed_columns(store: Store) -> None:
    await store.run(lambda tx: tx.flows.insert(_flow("r1")))

    def step(tx: Tx) -> None:  # a Step of a running run: data only
        flow = tx.flows.get("r1")
        assert flow is not None
        flow.version += 1
        tx.flows.update(flow)

    def close(tx: Tx) -> None:
        flow = tx.flows.get("r1")
        assert flow is not None
        flow.status, flow.closed_at, flow.retain_until = "completed", 5.0, 100.0
        tx.flows.update(flow)

    def listed(tx: Tx, status: str) -> list[str]:
        page = tx.flows.page(flow_type="T", status=status, limit=10, before_run_id=None)
        return [f.run_id for f in page]

    for _ in range(3):
        await store.run(step)
    flow = await store.run(lambda tx: tx.flows.get("r1"))
    assert flow is not None and flow.version == 3
    assert await store.run(lambda tx: listed(tx, "running")) == ["r1"]
    assert await store.run(lambda tx: tx.flows.due_for_deletion(1_000.0, 10)) == []

    await store.run(close)
    assert await store.run(lambda tx: listed(tx, "running")) == []
    assert await store.run(lambda tx: listed(tx, "completed")) == ["r1"]
    assert await store.run(lambda tx: tx.flows.due_for_deletion(1_000.0, 10)) == ["r1"]
    assert await store.run(lambda tx: tx.flows.due_for_deletion(50.0, 10)) == []

    # only the retention moves (status and close time as they were)
    def extend(tx: Tx) -> None:
        flow = tx.flows.get("r1")
        assert flow is not None
        flow.retain_until = 2_000.0
        tx.flows.update(flow)

    await store.run(extend)
    assert await store.run(lambda tx: tx.flows.due_for_deletion(1_000.0, 10)) == []
    assert await store.run(lambda tx: tx.flows.due_for_deletion(3_000.0, 10)) == ["r1"]
    # the closed run no longer holds its Flow ID: a new run may take it, once
    again = FlowRecord(run_id="r2", flow_id="f-r1", flow_type="T", started_at=2.0)
    assert await store.run(lambda tx: tx.flows.insert(again)) is True
    third = FlowRecord(run_id="r3", flow_id="f-r1", flow_type="T", started_at=3.0)
    assert await store.run(lambda tx: tx.flows.insert(third)) is False
