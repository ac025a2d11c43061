"""Worker gaps: a ready task waits for a Worker, with an optional schedule-to-start timeout.

A real server process and Workers speaking the wire protocol over a real WebSocket
(``RawWorker``); the Worker "outages" are real disconnects. Each test names the fault.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest
from dex._protocol import (
    DecisionSpec,
    FlowSpec,
    InvokeRpcRequest,
    Reject,
    RetryPolicySpec,
    RpcSpec,
    StartFlowRequest,
    StepOptionsSpec,
    StepSpec,
    Task,
    TaskResult,
    encoder,
)
from dex_server.__main__ import config_from_args
from dex_server.app import ServerConfig
from dex_server.testing import (
    RunningServer,
    create_test_database,
    drop_test_database,
    running_server,
)

from tests._pg import needs_postgres
from tests._rawworker import RawWorker, raw

_ONCE = RetryPolicySpec(maximum_attempts=1)


def _spec(flow_type: str, **options: Any) -> FlowSpec:
    return FlowSpec(
        flow_type=flow_type,
        start_step="A",
        steps=[StepSpec(step_type="A", options=StepOptionsSpec(**options))],
        rpcs=[RpcSpec(name="ping", timeout_s=3.0)],
    )


def _start(spec: FlowSpec, flow_id: str) -> bytes:
    return encoder.encode(
        StartFlowRequest(flow_type=spec.flow_type, flow_id=flow_id, spec=spec, input=raw(0))
    )


def _done(t: Task) -> TaskResult:
    if t.kind == "rpc":
        return TaskResult(task_id=t.task_id, rpc_output=raw("pong"))
    return TaskResult(
        task_id=t.task_id,
        decision=DecisionSpec(kind="graceful_complete", output=raw(t.attempt)),
    )


async def _complete(w: RawWorker, t: Task) -> TaskResult | None:
    return _done(t)


async def _poll(what: str, probe: Callable[[], Awaitable[Any]], timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _result(http: httpx.AsyncClient, flow_id: str) -> dict[str, Any]:
    body: dict[str, Any] = (await http.get(f"/v1/flows/{flow_id}/result?timeout_s=30")).json()
    assert body["status"] != "running", body
    return body


async def _history_types(http: httpx.AsyncClient, flow_id: str) -> list[str]:
    events = (await http.get(f"/v1/flows/{flow_id}/history?page_size=1000")).json()["events"]
    return [e["type"] for e in events]


async def test_a_task_redelivered_after_its_worker_vanished_waits_afresh(
    tmp_path: Path,
) -> None:
    """Fault: the only Worker disconnects mid-attempt (before any frame); no Worker for a
    while. Promise: the redelivered task's wait for a Worker starts again at the requeue,
    so the same attempt runs once a Worker is back."""
    spec = _spec("Redeliver", execute_retry=_ONCE)
    held = asyncio.Event()

    async def hold(w: RawWorker, t: Task) -> TaskResult | None:
        held.set()
        return None  # never answers: the disconnect ends the attempt

    # a 4 s default wait: the first Worker holds the task 3 s, then no Worker for 2 s
    async with (
        running_server(tmp_path, dispatch_wait_s=4.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
    ):
        async with RawWorker(srv.address, [spec], hold, slots=2, reserved=0):
            assert (await http.post("/v1/flows", content=_start(spec, "r1"))).status_code == 200
            await asyncio.wait_for(held.wait(), 30)
            await asyncio.sleep(3.0)  # the scenario: the attempt runs a while
        await asyncio.sleep(2.0)  # the scenario: no Worker at all
        async with RawWorker(srv.address, [spec], _complete) as second:
            res = await _result(http, "r1")
        assert res["status"] == "completed", res
        assert [t.attempt for t in second.tasks] == [1]


async def test_a_worker_that_rejected_a_task_is_offered_it_again(tmp_path: Path) -> None:
    """Fault: the only Worker answers ``no_capacity`` once (it is still finishing a
    cancelled task the server already forgot). Promise: the rejection is temporary: the
    same Worker gets the task again shortly, and a single-attempt Step runs."""
    spec = _spec("Rejected", execute_retry=_ONCE)
    rejected: list[str] = []

    async def reject_once(w: RawWorker, t: Task) -> TaskResult | None:
        if not rejected:
            rejected.append(t.task_id)
            await w.send(Reject(task_id=t.task_id, reason="no_capacity"))
            return None
        return _done(t)

    async with (
        running_server(tmp_path, dispatch_wait_s=4.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
        RawWorker(srv.address, [spec], reject_once, slots=2, reserved=0) as worker,
    ):
        assert (await http.post("/v1/flows", content=_start(spec, "j1"))).status_code == 200
        res = await _result(http, "j1")
        assert res["status"] == "completed", res
        assert [t.attempt for t in worker.tasks] == [1, 1]
        assert worker.tasks[0].task_id == rejected[0] != worker.tasks[1].task_id


async def test_schedule_to_start_timeout_fails_the_attempt_and_follows_the_retry_policy(
    tmp_path: Path,
) -> None:
    """A Step with ``schedule_to_start_timeout`` and no Worker: each attempt fails with
    ``SCHEDULE_TO_START_TIMEOUT`` naming the timeout and the Flow type, and retries."""
    retry = RetryPolicySpec(maximum_attempts=2, initial_interval_s=0.1)
    spec = _spec("Unserved", schedule_to_start_timeout_s=1.0, execute_retry=retry)
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=60) as http,
    ):
        assert (await http.post("/v1/flows", content=_start(spec, "u1"))).status_code == 200
        res = await _result(http, "u1")
        assert res["status"] == "failed", res
        assert "SCHEDULE_TO_START_TIMEOUT" in res["error_message"], res
        assert "schedule_to_start_timeout=1s" in res["error_message"], res
        assert "'Unserved'" in res["error_message"], res
        types = await _history_types(http, "u1")
        assert types.count("StepExecuteFailed") + types.count("StepExecuteAttemptFailed") >= 1


async def test_an_rpc_waits_for_a_worker_up_to_its_timeout(tmp_path: Path) -> None:
    """Fault: the Flow's Worker is down when an RPC arrives. Promise: the RPC waits for a
    Worker up to its own timeout (3 s here) and runs when one connects; with no Worker at
    all it fails with ``NO_WORKER_AVAILABLE`` naming the Flow type and the wait."""
    spec = FlowSpec(flow_type="Pinged", rpcs=[RpcSpec(name="ping", timeout_s=3.0)])
    body = encoder.encode(
        StartFlowRequest(flow_type=spec.flow_type, flow_id="p1", spec=spec, input=raw(None))
    )
    rpc = encoder.encode(InvokeRpcRequest(rpc_name="ping"))
    async with (
        running_server(tmp_path, dispatch_wait_s=1.0) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        assert (await http.post("/v1/flows", content=body)).status_code == 200
        call = asyncio.create_task(http.post("/v1/flows/p1/rpc", content=rpc))
        await asyncio.sleep(1.5)  # the scenario: the Worker is down longer than 1 s
        assert not call.done()
        async with RawWorker(srv.address, [spec], _complete):
            r = await call
        assert r.status_code == 200, r.text
        assert msgspec.json.decode(r.content) == {"output": "pong"}

        started = time.monotonic()
        r = await http.post("/v1/flows/p1/rpc", content=rpc)
        assert r.status_code == 503, r.text
        error = r.json()
        assert error["code"] == "NO_WORKER_AVAILABLE", error
        assert "'Pinged'" in error["message"] and "3s" in error["message"], error
        assert time.monotonic() - started >= 2.9


@needs_postgres
@pytest.mark.store_independent  # an explicit database
async def test_pooled_work_waits_for_a_busy_worker_on_another_server(tmp_path: Path) -> None:
    """Fault: two servers; the only Worker is attached to server B and busy; a Flow starts
    on server A. Promise: the Step waits in the pool (longer than the 10 s the servers
    used to allow) and runs once the Worker is free; a Step with its own
    schedule-to-start timeout fails with ``SCHEDULE_TO_START_TIMEOUT`` meanwhile."""
    patient = _spec("Patient", execute_retry=_ONCE)
    hurried = _spec("Hurried", execute_retry=_ONCE, schedule_to_start_timeout_s=2.0)
    release = asyncio.Event()

    async def busy_first(w: RawWorker, t: Task) -> TaskResult | None:
        if t.flow_id == "busy":
            await release.wait()
        return _done(t)

    url = create_test_database()
    a = RunningServer(tmp_path / "a", {"database_url": url})
    b = RunningServer(tmp_path / "b", {"database_url": url})
    try:
        for s in (a, b):
            s.directory.mkdir(parents=True)
            await s.start()
        async with (
            httpx.AsyncClient(base_url=a.url, timeout=60) as http_a,
            httpx.AsyncClient(base_url=b.url, timeout=60) as http_b,
            RawWorker(b.address, [patient, hurried], busy_first, slots=1, reserved=0) as w,
        ):
            assert (await http_b.post("/v1/flows", content=_start(patient, "busy"))).is_success
            await _poll("the Worker runs the busy Flow", lambda: _has_task(w, "busy"))
            assert (await http_a.post("/v1/flows", content=_start(patient, "later"))).is_success
            assert (await http_a.post("/v1/flows", content=_start(hurried, "hurry"))).is_success

            await asyncio.sleep(12.0)  # the scenario: the Worker stays busy for 12 s
            state = (await http_a.get("/v1/flows/later/state")).json()
            assert state["info"]["status"] == "running", state
            res = await _result(http_a, "hurry")
            assert res["status"] == "failed", res
            assert "SCHEDULE_TO_START_TIMEOUT" in res["error_message"], res
            assert "schedule_to_start_timeout=2s" in res["error_message"], res

            release.set()
            res = await _result(http_a, "later")
            assert res["status"] == "completed", res
            assert [t.attempt for t in w.tasks if t.flow_id == "later"] == [1]
            assert not [t for t in w.tasks if t.flow_id == "hurry"]
    finally:
        for s in (a, b):
            await s.stop()
        drop_test_database(url)


async def _has_task(w: RawWorker, flow_id: str) -> bool:
    return any(t.flow_id == flow_id for t in w.tasks)


def test_the_dispatch_wait_flag_is_an_optional_server_default(tmp_path: Path) -> None:
    """``--dispatch-wait-s`` still parses: off by default (and with 0), else seconds."""
    base = ["--database-path", str(tmp_path / "d.sqlite3")]
    assert config_from_args(base).dispatch_wait_s is None
    assert config_from_args([*base, "--dispatch-wait-s", "0"]).dispatch_wait_s is None
    assert config_from_args([*base, "--dispatch-wait-s", "2.5"]).dispatch_wait_s == 2.5
    with pytest.raises(ValueError, match="dispatch_wait_s"):
        ServerConfig(database_path=tmp_path / "d.sqlite3", dispatch_wait_s=-1.0)
