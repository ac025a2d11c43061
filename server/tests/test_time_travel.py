"""Time travel and continue-as-new, end to end: a server process, a Worker child process,
the store the suite runs on (SQLite, or PostgreSQL with ``DEX_TEST_DATABASE=postgres``).

The ``Order`` Flow runs Prepare → Charge → Await; Charge is single-attempt and every run of
it is logged, so a test counts how often its effect happened.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from dex import (
    AsyncClient,
    ClientOptions,
    FlowConfig,
    FlowStatus,
    StartFlowOptions,
    StepDurability,
    TimeTravelOptions,
    TimeTravelStepMethod,
    TimeTravelType,
)
from dex.errors import BadRequestError, FlowNotActiveOrNotFoundError, FlowNotFoundError
from dex_server.testing import RunningServer, running_server

from tests._pg import until
from tests._tt_flows import COUNTER, HOLDER, ORDER, registry
from tests.test_cli import Result, run_cli

SERVER_DIR = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]


class Rig:
    def __init__(self, server: RunningServer, client: AsyncClient, log: Path) -> None:
        self.server, self.client, self.log = server, client, log

    def lines(self, event: str, flow_id: str) -> list[list[str]]:
        rows = [ln.split() for ln in self.log.read_text().splitlines()]
        return [r for r in rows if r[0] == event and r[1] == flow_id]

    def count(self, event: str, flow_id: str, run_id: str | None = None) -> int:
        return sum(1 for r in self.lines(event, flow_id) if run_id is None or r[3] == run_id)

    async def events(self, flow_id: str, run_id: str = "") -> list[tuple[str, Any]]:
        page = await self.client.get_history(flow_id, run_id=run_id, page_size=1000)
        return [(e.type, json.loads(bytes(e.payload))) for e in page.events]

    async def peek(self, flow_id: str) -> dict[str, Any]:
        return dataclasses.asdict(await self.client.invoke_rpc(ORDER.peek, flow_id))


@asynccontextmanager
async def _rig(tmp: Path, **overrides: object) -> AsyncIterator[Rig]:
    """A server and a Worker child process on it."""
    log = tmp / "tt.log"
    log.touch()
    async with running_server(tmp / "server", **overrides) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests._tt_flows", srv.address],
            cwd=SERVER_DIR,
            env={**os.environ, "DEX_TT_LOG": str(log)},
            start_new_session=True,
        )
        try:
            client = AsyncClient(registry(), options=ClientOptions(server_address=srv.address))
            async with client:
                r = Rig(srv, client, log)
                await until(lambda: "ready" in log.read_text(), 30, "the Worker")
                yield r
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    async with _rig(tmp_path_factory.mktemp("time-travel")) as r:
        yield r


async def _waiting(rig: Rig, flow_id: str, execution_id: str) -> None:
    async def ok() -> bool:
        state = await rig.client.get_flow_state(flow_id)
        return any(
            s.step_execution_id == execution_id and s.phase == "waiting" for s in state.active_steps
        )

    await until(ok, 30, f"{execution_id} waiting")


async def _closed(rig: Rig, flow_id: str, run_id: str) -> None:
    async def ok() -> bool:
        info = await rig.client.describe_flow(flow_id)
        return info.run_id == run_id and info.status is FlowStatus.COMPLETED

    await until(ok, 30, f"run {run_id} completed")


async def _finished_order(rig: Rig, flow_id: str) -> str:
    run_id = await rig.client.start_flow(ORDER, flow_id, 5)
    await _waiting(rig, flow_id, "Await-1")
    await rig.client.invoke_rpc(ORDER.send, flow_id, "hello")
    await _closed(rig, flow_id, run_id)
    assert rig.count("charge", flow_id) == 1
    return run_id


async def test_beginning_takes_the_recorded_single_attempt_outcome(rig: Rig) -> None:
    fid = "tt-begin"
    old = await _finished_order(rig, fid)
    new = await rig.client.time_travel(fid, TimeTravelOptions(TimeTravelType.BEGINNING))
    assert new != old
    await _closed(rig, fid, new)
    # Prepare ran again; Charge (single attempt, committed) did not; the RPC was re-applied
    assert rig.count("prepare", fid, new) == 1
    assert rig.count("charge", fid) == 1
    assert rig.count("await-exec", fid, new) == 1
    assert await rig.peek(fid) == {
        "trail": ["prepare", "charge", "got hello"],
        "charged": 5,
        "note": "hello",
    }
    events = await rig.events(fid)
    assert events[0][0] == "TimeTravelFork"
    fork = events[0][1]
    assert fork["previousRunId"] == old
    assert fork["forkPoint"] == {"type": "BEGINNING"}
    assert fork["singleAttempt"]["policy"] == "take_recorded_outcome"
    assert fork["singleAttempt"]["takeRecordedOutcome"] == ["Charge-1"]
    assert ("RecordedOutcomeTaken", "Charge-1") in [
        (t, p.get("stepExecutionId")) for t, p in events
    ]
    reapplied = [p for t, p in events if t == "RpcExecutionCompleted"]
    assert [p["reappliedFrom"]["runId"] for p in reapplied] == [old]
    # the old run is preserved and readable by its run ID
    old_events = await rig.events(fid, old)
    assert old_events[0][0] == "FlowStarted"
    assert old_events[-1][1]["status"] == "completed"
    result = await rig.client.wait_for_flow(fid)
    assert result.status is FlowStatus.COMPLETED


async def test_rerun_option_and_skip_writes_reapply(rig: Rig) -> None:
    fid = "tt-rerun"
    await _finished_order(rig, fid)
    opts = TimeTravelOptions(
        TimeTravelType.BEGINNING, skip_writes_reapply=True, rerun_single_attempt=True
    )
    new = await rig.client.time_travel(fid, opts)
    await _waiting(rig, fid, "Await-1")  # the message was not re-applied: it waits again
    assert rig.count("charge", fid) == 2  # asked for: Charge ran again
    assert await rig.peek(fid) == {"trail": ["prepare", "charge"], "charged": 5, "note": None}
    fork = (await rig.events(fid))[0][1]
    assert fork["skipWritesReapply"] is True
    assert fork["singleAttempt"] == {
        "policy": "rerun",
        "takeRecordedOutcome": [],
        "outcomeUnknown": [],
        "rerun": ["Charge-1"],
    }
    await rig.client.invoke_rpc(ORDER.send, fid, "again")
    await _closed(rig, fid, new)
    assert (await rig.peek(fid))["trail"] == ["prepare", "charge", "got again"]


async def test_step_execution_id_execute_keeps_the_wait_result(rig: Rig) -> None:
    fid = "tt-exec"
    await _finished_order(rig, fid)
    opts = TimeTravelOptions(
        TimeTravelType.STEP_EXECUTION_ID,
        step_execution_id="Await-1",
        step_method=TimeTravelStepMethod.EXECUTE,
    )
    new = await rig.client.time_travel(fid, opts)
    await _closed(rig, fid, new)
    assert rig.count("await-wait", fid, new) == 0  # its WaitFor result was kept
    assert rig.count("await-exec", fid, new) == 1
    assert rig.count("prepare", fid) == 1 and rig.count("charge", fid) == 1
    assert (await rig.peek(fid))["trail"] == ["prepare", "charge", "got hello"]


async def test_step_type_wait_for_reruns_the_wait_with_the_message_reapplied(rig: Rig) -> None:
    fid = "tt-type"
    await _finished_order(rig, fid)
    opts = TimeTravelOptions(
        TimeTravelType.STEP_TYPE, step_type="Await", step_method=TimeTravelStepMethod.WAIT_FOR
    )
    new = await rig.client.time_travel(fid, opts)
    await _closed(rig, fid, new)
    assert rig.count("await-wait", fid, new) == 1
    assert rig.count("prepare", fid) == 1 and rig.count("charge", fid) == 1
    fork = (await rig.events(fid))[0][1]
    assert fork["forkPoint"] == {
        "type": "STEP_TYPE",
        "stepExecutionId": "Await-1",
        "stepMethod": "WAIT_FOR",
    }


async def test_history_event_time_forks_after_that_event(rig: Rig) -> None:
    fid = "tt-time"
    old = await _finished_order(rig, fid)
    page = await rig.client.get_history(fid, run_id=old, page_size=1000)
    charge = next(
        e
        for e in page.events
        if e.type == "StepExecuteCompleted"
        and json.loads(bytes(e.payload))["context"]["stepType"] == "Charge"
    )
    at = datetime.fromtimestamp(charge.event_time, UTC)
    new = await rig.client.time_travel(
        fid, TimeTravelOptions(TimeTravelType.HISTORY_EVENT_TIME, history_event_time=at)
    )
    await _closed(rig, fid, new)
    # everything up to Charge's commit is kept; Await runs again from its WaitFor
    assert rig.count("prepare", fid) == 1 and rig.count("charge", fid) == 1
    assert rig.count("await-wait", fid, new) == 1
    assert (await rig.peek(fid))["trail"] == ["prepare", "charge", "got hello"]


async def test_time_travel_of_a_running_flow_terminates_the_old_run(rig: Rig) -> None:
    fid = "tt-running"
    old = await rig.client.start_flow(ORDER, fid, 2)
    await _waiting(rig, fid, "Await-1")
    new = await rig.client.time_travel(
        fid, TimeTravelOptions(TimeTravelType.STEP_TYPE, step_type="Await")
    )
    await _waiting(rig, fid, "Await-1")
    assert (await rig.client.describe_flow(fid)).run_id == new
    closed = (await rig.events(fid, old))[-1]
    assert closed[0] == "FlowClosed" and closed[1]["status"] == "terminated"
    await rig.client.invoke_rpc(ORDER.send, fid, "late")
    await _closed(rig, fid, new)
    assert rig.count("charge", fid) == 1


async def test_bad_fork_points_are_refused_and_change_nothing(rig: Rig) -> None:
    fid = "tt-bad"
    old = await _finished_order(rig, fid)
    with pytest.raises(FlowNotFoundError):
        await rig.client.time_travel("no-such-flow", TimeTravelOptions(TimeTravelType.BEGINNING))
    for opts in [
        TimeTravelOptions(TimeTravelType.STEP_EXECUTION_ID, step_execution_id="Nope-1"),
        TimeTravelOptions(TimeTravelType.STEP_EXECUTION_ID),
        TimeTravelOptions(TimeTravelType.STEP_TYPE, step_type="Nope"),
        TimeTravelOptions(TimeTravelType.HISTORY_EVENT_TIME),
        TimeTravelOptions(
            TimeTravelType.STEP_EXECUTION_ID,
            step_execution_id="Prepare-1",
            step_method=TimeTravelStepMethod.WAIT_FOR,
        ),
    ]:
        if opts.step_method is TimeTravelStepMethod.WAIT_FOR:
            continue  # a Step without wait_for forks at its execute: not an error
        with pytest.raises(BadRequestError):
            await rig.client.time_travel(fid, opts)
    info = await rig.client.describe_flow(fid)
    assert (info.run_id, info.status) == (old, FlowStatus.COMPLETED)
    page = await rig.client.list_flows(flow_type="Order", page_size=1000)
    assert [f.run_id for f in page.flows if f.flow_id == fid] == [old]
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await rig.client.trigger_continue_as_new(fid)


async def test_a_durably_started_single_attempt_step_in_flight_is_not_rerun(rig: Rig) -> None:
    fid = "tt-inflight"
    old = await rig.client.start_flow(HOLDER, fid)
    await until(lambda: rig.count("hold", fid) == 1, 30, "Hold started")
    new = await rig.client.time_travel(fid, TimeTravelOptions(TimeTravelType.BEGINNING))
    result = await rig.client.wait_for_flow(fid, timeout=30)
    assert result.status is FlowStatus.FAILED
    assert rig.count("hold", fid) == 1  # its outcome is unknown: it is not run again
    events = await rig.events(fid)
    assert events[0][1]["singleAttempt"]["outcomeUnknown"] == ["Hold-1"]
    failed = [p for t, p in events if t == "StepExecuteFailed"]
    assert "OUTCOME_UNKNOWN" in json.dumps(failed)
    assert (await rig.client.describe_flow(fid)).run_id == new
    assert (await rig.events(fid, old))[-1][1]["status"] == "terminated"


async def test_time_travel_twice_replays_through_the_first_fork(rig: Rig) -> None:
    fid = "tt-twice"
    first = await _finished_order(rig, fid)
    second = await rig.client.time_travel(
        fid,
        TimeTravelOptions(TimeTravelType.STEP_TYPE, step_type="Await", skip_writes_reapply=True),
    )
    await _waiting(rig, fid, "Await-1")
    await rig.client.invoke_rpc(ORDER.send, fid, "second")
    await _closed(rig, fid, second)
    # fork the fork: from its beginning, which is the Flow's beginning in the first run
    third = await rig.client.time_travel(fid, TimeTravelOptions(TimeTravelType.BEGINNING))
    await _closed(rig, fid, third)
    assert rig.count("prepare", fid) == 2 and rig.count("charge", fid) == 1
    assert (await rig.peek(fid))["trail"] == ["prepare", "charge", "got second"]
    fork = (await rig.events(fid))[0][1]
    assert fork["previousRunId"] == second and fork["targetRunId"] == first
    assert [r["runId"] for r in fork["reapplied"]] == [second]


async def _total(rig: Rig, fid: str, want: int) -> None:
    async def ok() -> bool:
        got: int = await rig.client.invoke_rpc(COUNTER.total, fid)
        return got == want

    await until(ok, 30, f"total {want}")


async def test_continue_as_new_by_trigger_carries_the_state(rig: Rig) -> None:
    fid = "can-trigger"
    old = await rig.client.start_flow(COUNTER, fid)
    await rig.client.invoke_rpc(COUNTER.tick, fid, 3)
    await _total(rig, fid, 3)
    await _waiting(rig, fid, "Tick-2")
    await rig.client.trigger_continue_as_new(fid)

    async def moved() -> bool:
        return (await rig.client.describe_flow(fid)).run_id != old

    await until(moved, 30, "the new run")
    new = (await rig.client.describe_flow(fid)).run_id
    await _waiting(rig, fid, "Tick-2")  # the parked execution moved, with its Wait
    await rig.client.invoke_rpc(COUNTER.tick, fid, 4)
    await _total(rig, fid, 7)  # the Attribute was carried
    assert rig.count("tick-4", fid, new) == 1
    # a continued run can be forked too: its history goes on from the run it came from
    forked = await rig.client.time_travel(
        fid, TimeTravelOptions(TimeTravelType.STEP_EXECUTION_ID, step_execution_id="Tick-2")
    )
    await _total(rig, fid, 7)
    assert rig.count("tick-4", fid, forked) == 1
    await rig.client.stop_flow(fid)
    events = await rig.events(fid, new)
    assert events[0][0] == "FlowContinued" and events[0][1]["previousRunId"] == old
    closed = (await rig.events(fid, old))[-1]
    assert closed == ("FlowClosed", {"status": "continued_as_new", "continuedToRunId": new})
    # listings leave such runs out unless asked for by status
    listed = await rig.client.list_flows(flow_type="Counter", page_size=1000)
    assert old not in [f.run_id for f in listed.flows]
    asked = await rig.client.list_flows(
        flow_type="Counter", status=FlowStatus.CONTINUED_AS_NEW, page_size=1000
    )
    assert old in [f.run_id for f in asked.flows]


async def test_continue_as_new_by_threshold_keeps_history_bounded(rig: Rig) -> None:
    fid = "can-threshold"
    opts = StartFlowOptions(config_override=FlowConfig(continue_as_new_threshold=6))
    first = await rig.client.start_flow(COUNTER, fid, options=opts)
    for i in range(1, 9):
        await rig.client.invoke_rpc(COUNTER.tick, fid, i)
        await _total(rig, fid, i * (i + 1) // 2)
    runs = await rig.client.list_flows(
        flow_type="Counter", status=FlowStatus.CONTINUED_AS_NEW, page_size=1000
    )
    mine = [f for f in runs.flows if f.flow_id == fid]
    assert len(mine) >= 2 and first in [f.run_id for f in mine]
    for f in mine:
        assert len(await rig.events(fid, f.run_id)) <= 6 + 3
    latest = await rig.events(fid)
    assert latest[0][0] == "FlowContinued" and len(latest) <= 6 + 3

    # the smallest threshold rolls over after every event of the run's own, and no more
    tiny = "can-tiny"
    opts = StartFlowOptions(config_override=FlowConfig(continue_as_new_threshold=1))
    await rig.client.start_flow(COUNTER, tiny, options=opts)
    for i in (1, 2, 3):
        await rig.client.invoke_rpc(COUNTER.tick, tiny, i)
        await _total(rig, tiny, i * (i + 1) // 2)

    async def continued() -> int:
        runs = await rig.client.list_flows(
            flow_type="Counter", status=FlowStatus.CONTINUED_AS_NEW, page_size=1000
        )
        return len([f for f in runs.flows if f.flow_id == tiny])

    async def three() -> bool:
        return await continued() >= 3

    # each tick's cycle ends parked, and the run rolls over then (after the commit)
    await until(three, 30, "three rollovers")
    assert await continued() <= 12


async def _found(rig: Rig, query: str, *, include: bool = False) -> list[tuple[str, Any]]:
    page = await rig.client.search_flows(query, 100, include_continued_as_new=include)
    return [(f.run_id, dict(f.indexed_attributes)) for f in page.flows]


async def test_a_fork_is_found_by_its_indexed_attributes_at_once(rig: Rig) -> None:
    fid = "tt-search"
    old = await _finished_order(rig, fid)
    new = await rig.client.time_travel(fid, TimeTravelOptions(TimeTravelType.BEGINNING))
    # the fork's commit wrote the re-applied note's search row: no wait for a Step
    found = await _found(rig, f"FlowId = '{fid}' AND TtNote = 'hello'")
    assert [r for r, _ in found] == [new, old]
    assert found[0][1] == {"TtNote": "hello"}
    await _closed(rig, fid, new)
    # without the re-applied writes the new run has no note, so only the old run matches
    bare = await rig.client.time_travel(
        fid, TimeTravelOptions(TimeTravelType.BEGINNING, skip_writes_reapply=True)
    )
    found = await _found(rig, f"FlowId = '{fid}' AND TtNote = 'hello'")
    assert bare not in [r for r, _ in found] and new in [r for r, _ in found]
    await rig.client.stop_flow(fid)


async def test_a_continued_run_is_found_and_the_old_one_only_when_asked(rig: Rig) -> None:
    fid = "can-search"
    old = await rig.client.start_flow(COUNTER, fid)
    await rig.client.invoke_rpc(COUNTER.tick, fid, 3)
    await _total(rig, fid, 3)
    await _waiting(rig, fid, "Tick-2")
    await rig.client.trigger_continue_as_new(fid)

    async def moved() -> bool:
        return (await rig.client.describe_flow(fid)).run_id != old

    await until(moved, 30, "the new run")
    new = (await rig.client.describe_flow(fid)).run_id
    query = f"FlowId = '{fid}' AND TtTotal = 3"
    assert await _found(rig, query) == [(new, {"TtTotal": 3})]
    assert [r for r, _ in await _found(rig, query, include=True)] == [new, old]
    await rig.client.invoke_rpc(COUNTER.tick, fid, 4)
    await _total(rig, fid, 7)
    assert [r for r, _ in await _found(rig, f"FlowId = '{fid}' AND TtTotal = 7")] == [new]
    # a fork of the continued run: its state starts from the old run's total (3), and the
    # re-applied tick runs again in the fork, so it converges on 7 like the run it replaced
    forked = await rig.client.time_travel(
        fid, TimeTravelOptions(TimeTravelType.STEP_EXECUTION_ID, step_execution_id="Tick-2")
    )
    await _total(rig, fid, 7)
    found = await _found(rig, f"FlowId = '{fid}' AND TtTotal = 7")
    assert sorted(r for r, _ in found) == sorted([forked, new])
    assert await _found(rig, f"FlowId = '{fid}' AND TtTotal = 3") == []
    await rig.client.stop_flow(fid)


async def test_config_and_timeout_deadline_go_on_in_the_new_runs(rig: Rig) -> None:
    fid = "can-config"
    config = FlowConfig(step_durability=StepDurability.ASYNC, continue_as_new_threshold=500)
    opts = StartFlowOptions(config_override=config, timeout=timedelta(hours=2))
    old = await rig.client.start_flow(COUNTER, fid, options=opts)
    await _waiting(rig, fid, "Tick-1")
    first = await rig.client.describe_flow(fid)
    assert first.config == config and first.timeout_at is not None
    await rig.client.trigger_continue_as_new(fid)

    async def moved() -> bool:
        return (await rig.client.describe_flow(fid)).run_id != old

    await until(moved, 30, "the new run")
    continued = await rig.client.describe_flow(fid)
    assert continued.config == config
    assert continued.timeout_at == first.timeout_at  # continuing does not extend the time
    await _waiting(rig, fid, "sys:timeout_handler-1")
    # update_flow_config changes the threshold the run rolls over at
    await rig.client.update_flow_config(fid, FlowConfig(continue_as_new_threshold=2))
    await rig.client.invoke_rpc(COUNTER.tick, fid, 1)

    async def rolled() -> bool:
        return (await rig.client.describe_flow(fid)).run_id not in (old, continued.run_id)

    await until(rolled, 30, "a rollover at the updated threshold")
    updated = FlowConfig(step_durability=StepDurability.ASYNC, continue_as_new_threshold=2)
    assert (await rig.client.describe_flow(fid)).config == updated
    await rig.client.update_flow_config(fid, FlowConfig(continue_as_new_threshold=0))
    forked_id = await rig.client.time_travel(fid, TimeTravelOptions(TimeTravelType.BEGINNING))
    forked = await rig.client.describe_flow(fid)
    assert forked.run_id == forked_id
    assert forked.config == FlowConfig(
        step_durability=StepDurability.ASYNC, continue_as_new_threshold=0
    )
    assert forked.timeout_at == first.timeout_at
    await _waiting(rig, fid, "sys:timeout_handler-1")
    await rig.client.stop_flow(fid)


async def test_dexcli_flow_time_travel_and_continue_as_new(rig: Rig) -> None:
    fid = "tt-cli"
    old = await _finished_order(rig, fid)
    base = ("--server", rig.server.address, "--output", "json", "flow")

    def cli(*args: str) -> Result:
        return run_cli(*base, *args)

    refused = await asyncio.to_thread(cli, "time-travel", fid, "--type", "step_type")
    assert refused.code != 0 and "--target" in refused.err
    unconfirmed = await asyncio.to_thread(cli, "time-travel", fid, "--type", "beginning")
    assert unconfirmed.code != 0 and "--yes" in unconfirmed.err
    bad = await asyncio.to_thread(
        cli, "time-travel", fid, "--type", "step_execution_id", "--target", "Nope-1", "--yes"
    )
    assert bad.code != 0 and "Nope-1" in bad.err
    assert (await rig.client.describe_flow(fid)).run_id == old  # nothing changed
    done = await asyncio.to_thread(
        cli,
        "time-travel",
        fid,
        "--type",
        "step_execution_id",
        "--target",
        "Await-1",
        "--step-method",
        "execute",
        "--reason",
        "replay the reply",
        "--yes",
    )
    assert done.code == 0, done.err
    new = done.json()["runId"]
    await _closed(rig, fid, new)
    fork = (await rig.events(fid))[0][1]
    assert fork["reason"] == "replay the reply"
    assert fork["forkPoint"]["stepMethod"] == "EXECUTE"
    closed = await asyncio.to_thread(cli, "continue-as-new", fid, "--yes")
    assert closed.code != 0 and "not running" in closed.err
    missing = await asyncio.to_thread(cli, "continue-as-new", "no-such-flow", "--yes")
    assert missing.code == 3


async def test_time_travel_after_the_earlier_runs_are_gone_starts_from_the_carried_state(
    tmp_path: Path,
) -> None:
    # every value over one byte is a blob: the carried state holds blob references
    async with _rig(
        tmp_path, retention_s=0.5, retention_sweep_interval_s=0.2, blob_threshold_bytes=1
    ) as r:
        fid = "can-gone"
        old = await r.client.start_flow(COUNTER, fid)
        await r.client.invoke_rpc(COUNTER.tick, fid, 30)
        await _total(r, fid, 30)
        await _waiting(r, fid, "Tick-2")
        await r.client.trigger_continue_as_new(fid)

        async def gone() -> bool:
            try:
                await r.client.get_history(fid, run_id=old)
            except FlowNotFoundError:
                return True
            return False

        await until(gone, 30, "the first run deleted by retention")
        new = await r.client.time_travel(fid, TimeTravelOptions(TimeTravelType.BEGINNING))
        await _waiting(r, fid, "Tick-2")
        await r.client.invoke_rpc(COUNTER.tick, fid, 12)
        await _total(r, fid, 42)  # the total carried as a blob, then 12 added
        assert r.count("tick-12", fid, new) == 1
        fork = (await r.events(fid))[0][1]
        assert fork["targetEventId"] == 2  # right after FlowContinued, in the continued run


def _worker(srv: RunningServer, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests._tt_flows", srv.address],
        cwd=SERVER_DIR,
        env={**os.environ, "DEX_TT_LOG": str(log)},
        start_new_session=True,
    )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


async def test_recorded_outcomes_survive_a_server_sigkill(tmp_path: Path) -> None:
    log = tmp_path / "tt.log"
    log.touch()

    def count(event: str) -> int:
        return sum(1 for ln in log.read_text().splitlines() if ln.startswith(f"{event} "))

    async with running_server(tmp_path / "server", server_lease_s=2) as srv:
        worker = _worker(srv, log)
        try:
            async with AsyncClient(
                registry(), options=ClientOptions(server_address=srv.address)
            ) as c:
                await until(lambda: "ready" in log.read_text(), 30, "the Worker")
                rig = Rig(srv, c, log)
                await _finished_order(rig, "crash")
        finally:
            _kill(worker)
        # no Worker: the fork's Prepare waits; the server dies with the fork committed
        async with AsyncClient(registry(), options=ClientOptions(server_address=srv.address)) as c:
            await c.time_travel("crash", TimeTravelOptions(TimeTravelType.BEGINNING))
        srv.kill()
        await srv.restart()
        # and a fork whose first move is the recorded outcome, killed right after it
        async with AsyncClient(registry(), options=ClientOptions(server_address=srv.address)) as c:
            worker = _worker(srv, log)
            try:
                await until(lambda: count("ready") == 2, 30, "the Worker again")
                await _closed(Rig(srv, c, log), "crash", (await c.describe_flow("crash")).run_id)
                assert count("prepare") == 2 and count("charge") == 1
                await c.time_travel(
                    "crash",
                    TimeTravelOptions(
                        TimeTravelType.STEP_EXECUTION_ID,
                        step_execution_id="Charge-1",
                        step_method=TimeTravelStepMethod.EXECUTE,
                    ),
                )
            finally:
                _kill(worker)
        srv.kill()
        await srv.restart()
        async with AsyncClient(registry(), options=ClientOptions(server_address=srv.address)) as c:
            worker = _worker(srv, log)
            try:
                run_id = (await c.describe_flow("crash")).run_id
                await _closed(Rig(srv, c, log), "crash", run_id)
            finally:
                _kill(worker)
    assert count("charge") == 1  # never rerun, whatever the crash interrupted
    assert count("prepare") == 2
