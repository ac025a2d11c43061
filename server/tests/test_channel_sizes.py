"""Channel sizes through a server, on the store the suite runs on (SQLite, or PostgreSQL with
``DEX_TEST_DATABASE=postgres``): what a Flow reads as a Channel's size, and the
``channel_sizes`` rows behind it, stay equal to the pending messages across publishes,
consumption, deletes by a transactional RPC, time travel, continue-as-new and the
retention sweep of the runs left behind.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import dex
import psycopg
import pytest
from dex import Context, StepDecision, TimeTravelOptions, TimeTravelType, Wait, rpc
from dex_server.testing import RunningServer, running_server

from tests._pg import until

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

JOBS = dex.Channel("jobs", int)
GO = dex.Channel("go", int)
BOX = dex.ChannelMap("box", int)


class Park(dex.Step[None]):
    """Waits for a ``go``, then takes one job."""

    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(GO.for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        return StepDecision.go_to(Take)


class Take(dex.Step[None]):
    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(JOBS.for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        return StepDecision.go_to(Park)


class Backlog(dex.Flow[None]):
    def get_steps(self) -> dex.StepList[None]:
        return dex.StepList.start_step(Park()).other_steps(Take())

    def get_persistence_schema(self) -> dex.PersistenceSchema:
        return dex.PersistenceSchema.of(JOBS, GO, BOX)

    @rpc
    def fill(self, context: Context, input: int) -> None:
        for k in range(input):
            JOBS.publish(context, k)
            if k % 3 == 0:
                BOX.publish(context, "a", k)

    @rpc
    def go(self, context: Context) -> None:
        GO.publish(context, 1)

    @rpc
    def sizes(self, context: Context) -> dict[str, int]:
        return {"jobs": JOBS.size(context), "box/a": BOX.size(context, "a")}

    @rpc(load_channels=(JOBS,))
    def job_ids(self, context: Context) -> list[str]:
        return [m.message_id for m in JOBS.pending_messages(context)]

    @rpc(is_transactional=True, load_channels=(JOBS,))
    def drop(self, context: Context, input: list[str]) -> int:
        for message_id in input:
            JOBS.delete(context, message_id)
        return JOBS.size(context)


BACKLOG = Backlog()


def _registry() -> dex.Registry:
    return dex.Registry([BACKLOG])


# one statement, so one snapshot of both: every (run, Channel) whose row differs from the
# count of its pending messages, or that has a row without messages
_MISMATCHES = (
    "SELECT * FROM (SELECT run_id, channel, count(*) FROM channel_messages GROUP BY"
    " run_id, channel EXCEPT SELECT run_id, channel, size FROM channel_sizes) AS missing"
    " UNION ALL SELECT * FROM (SELECT run_id, channel, size FROM channel_sizes EXCEPT"
    " SELECT run_id, channel, count(*) FROM channel_messages GROUP BY run_id, channel) AS extra"
)


class Db:
    """Reads the server's database next to it."""

    def __init__(self, server: RunningServer) -> None:
        self.server = server

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.server.database_url is not None:
            with psycopg.connect(self.server.database_url) as pg:
                return [tuple(r) for r in pg.execute(sql.replace("?", "%s").encode(), args)]
        conn = sqlite3.connect(f"file:{self.server.database_path}?mode=ro", uri=True)
        try:
            return conn.execute(sql, args).fetchall()
        finally:
            conn.close()

    def mismatches(self) -> list[tuple[Any, ...]]:
        return self.rows(_MISMATCHES)

    def pending(self, run_id: str) -> dict[str, int]:
        rows = self.rows(
            "SELECT channel, count(*) FROM channel_messages WHERE run_id=? GROUP BY channel",
            (run_id,),
        )
        return {str(r[0]): int(r[1]) for r in rows}

    def size_rows(self, run_id: str) -> int:
        return int(self.rows("SELECT count(*) FROM channel_sizes WHERE run_id=?", (run_id,))[0][0])


@asynccontextmanager
async def _rig(tmp_path: Path) -> AsyncIterator[tuple[dex.AsyncClient, Db]]:
    overrides = {"fsync": False, "retention_s": 0.5, "retention_sweep_interval_s": 0.2}
    async with running_server(tmp_path / "server", **overrides) as srv:
        worker = dex.AsyncWorker(_registry(), options=dex.WorkerOptions(server_address=srv.address))
        task = asyncio.create_task(worker.start())
        try:
            await worker.wait_pull_registered(timeout=30)
            options = dex.ClientOptions(server_address=srv.address, timeout=30.0)
            async with dex.AsyncClient(_registry(), options=options) as client:
                yield client, Db(srv)
        finally:
            await worker.close()
            await task


async def _settled(client: dex.AsyncClient, db: Db, flow_id: str) -> dict[str, int]:
    """Once the Flow is parked with no ``go`` left: its sizes, which must equal its latest
    run's pending messages."""

    async def parked() -> bool:
        run_id = (await client.describe_flow(flow_id)).run_id
        steps = (await client.get_flow_state(flow_id)).active_steps
        waiting = [s.step_execution_id for s in steps if s.phase == "waiting"]
        return "go" not in db.pending(run_id) and [w.split("-")[0] for w in waiting] == ["Park"]

    await until(parked, 30, f"{flow_id} parked")
    run_id = (await client.describe_flow(flow_id)).run_id
    got: dict[str, int] = await client.invoke_rpc(BACKLOG.sizes, flow_id)
    assert {k: v for k, v in got.items() if v} == db.pending(run_id)
    assert db.mismatches() == []
    return got


async def test_sizes_stay_equal_to_the_pending_messages_through_a_flows_life(
    tmp_path: Path,
) -> None:
    async with _rig(tmp_path) as (client, db):
        fid = "sizes"
        first = await client.start_flow(BACKLOG, fid)
        await client.invoke_rpc(BACKLOG.fill, fid, 12)
        assert await _settled(client, db, fid) == {"jobs": 12, "box/a": 4}

        for _ in range(3):  # each go takes one job
            await client.invoke_rpc(BACKLOG.go, fid)
        await until(lambda: db.pending(first).get("jobs") == 9, 30, "three jobs taken")
        assert await _settled(client, db, fid) == {"jobs": 9, "box/a": 4}

        ids: list[str] = await client.invoke_rpc(BACKLOG.job_ids, fid)
        assert await client.invoke_rpc(BACKLOG.drop, fid, ids[:2]) == 7
        assert await _settled(client, db, fid) == {"jobs": 7, "box/a": 4}

        # the fork republishes what the RPCs published: its own rows, counted alike
        second = await client.time_travel(fid, TimeTravelOptions(TimeTravelType.BEGINNING))
        assert second != first
        forked = await _settled(client, db, fid)
        assert forked["box/a"] == 4 and forked["jobs"] > 0
        assert db.size_rows(second) > 0

        await client.trigger_continue_as_new(fid)

        async def continued() -> bool:
            return (await client.describe_flow(fid)).run_id != second

        await until(continued, 30, "continue-as-new")
        third = (await client.describe_flow(fid)).run_id
        assert await _settled(client, db, fid) == forked  # the pending messages carried over
        assert db.size_rows(third) == len(forked)

        # the runs left behind are swept with their messages, and their sizes with them
        async def swept() -> bool:
            return db.size_rows(first) == db.size_rows(second) == 0 and not (
                db.pending(first) or db.pending(second)
            )

        await until(swept, 30, "the closed runs swept")
        assert db.mismatches() == []
        assert await _settled(client, db, fid) == forked
