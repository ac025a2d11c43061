"""Frames a Worker should not send: too large, or not readable. The server answers them.

A raw Worker (no SDK) sends a result frame over the announced ``max_worker_frame_bytes``,
or a garbled one: the attempt fails with an error naming the problem, the connection stays
open, and the task is not delivered again at the same attempt. Batches of frames (one
WebSocket message holding several) are handled frame by frame, in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import websockets
from dex._protocol import (
    DecisionSpec,
    FlowSpec,
    Heartbeat,
    HeartbeatAck,
    ResultFrame,
    RetryPolicySpec,
    StartFlowRequest,
    StepOptionsSpec,
    StepSpec,
    TaskResult,
    encode_batch,
    encoder,
)
from dex_server.testing import running_server

from tests._rawworker import RawWorker, first_task, raw, silent

MIB = 1024 * 1024
SPEC = FlowSpec(
    flow_type="Frames",
    start_step="A",
    steps=[
        StepSpec(
            step_type="A",
            options=StepOptionsSpec(execute_retry=RetryPolicySpec(maximum_attempts=1)),
        )
    ],
)


async def start(http: httpx.AsyncClient, flow_id: str) -> None:
    body = encoder.encode(StartFlowRequest(flow_type="Frames", flow_id=flow_id, spec=SPEC))
    assert (await http.post("/v1/flows", content=body)).status_code == 200


async def result_of(http: httpx.AsyncClient, flow_id: str) -> dict[str, object]:
    body: dict[str, object] = (await http.get(f"/v1/flows/{flow_id}/result?timeout_s=20")).json()
    return body


async def test_an_oversized_result_frame_fails_its_attempt_once(tmp_path: Path) -> None:
    # frame limit: 4 MiB state + 2 x 1 MiB values + 1 MiB = 7 MiB
    limits = {"max_value_bytes": MIB, "max_flow_state_bytes": 4 * MIB, "max_request_bytes": MIB}
    async with (
        running_server(tmp_path, **limits) as srv,
        RawWorker(srv.address, [SPEC], silent) as w,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        await start(http, "big")
        task = await first_task(w)
        result = TaskResult(
            task_id=task.task_id,
            decision=DecisionSpec(kind="graceful_complete", output=raw("x" * (7 * MIB + 1000))),
        )
        await w.send_raw(encoder.encode({"type": "result", "result": result}))
        res = await result_of(http, "big")
        assert res["status"] == "failed", res
        assert "max_worker_frame_bytes" in str(res["error_message"]), res
        assert len(w.tasks) == 1  # not delivered again
        assert w.ws is not None and w.ws.close_code is None  # the connection stayed open


async def test_a_garbled_result_frame_fails_its_attempt_once(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], silent) as w,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        await start(http, "garbled")
        task = await first_task(w)
        # valid JSON, but not a TaskResult: attribute_writes must be an object
        bad = {"type": "result", "result": {"task_id": task.task_id, "attribute_writes": 5}}
        await w.send_raw(encoder.encode(bad))
        res = await result_of(http, "garbled")
        assert res["status"] == "failed", res
        assert "BAD_REQUEST" in str(res["error_message"]), res
        assert len(w.tasks) == 1
        assert w.ws is not None and w.ws.close_code is None


async def test_a_durable_heartbeat_for_an_unknown_task_gets_an_error(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], silent) as w,
    ):
        await w.send(Heartbeat(task_id="no-such-task", durable=True, seq=7))
        deadline = time.monotonic() + 20
        while not any(isinstance(f, HeartbeatAck) for f in w.frames):
            assert time.monotonic() < deadline, "the durable heartbeat got no answer"
            await asyncio.sleep(0.02)
        ack = next(f for f in w.frames if isinstance(f, HeartbeatAck))
        assert (ack.task_id, ack.seq, ack.error_code) == ("no-such-task", 7, "FLOW_NOT_ACTIVE")


DEFAULT_RETRY = FlowSpec(flow_type="Frames", start_step="A", steps=[StepSpec(step_type="A")])


async def test_a_result_with_an_unknown_decision_kind_fails_at_once(tmp_path: Path) -> None:
    # the default retry policy: a frame that cannot be read would come back the same way
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [DEFAULT_RETRY], silent) as w,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        body = StartFlowRequest(flow_type="Frames", flow_id="explode", spec=DEFAULT_RETRY)
        assert (await http.post("/v1/flows", content=encoder.encode(body))).status_code == 200
        task = await first_task(w)
        decision = {"kind": "explode"}
        bad = {"type": "result", "result": {"task_id": task.task_id, "decision": decision}}
        await w.send_raw(encoder.encode(bad))
        res = await result_of(http, "explode")
        assert res["status"] == "failed", res
        assert "BAD_REQUEST" in str(res["error_message"]), res
        assert "explode" in str(res["error_message"]), res
        assert len(w.tasks) == 1  # failed once, not retried


async def test_garbage_frames_are_logged_a_few_times_then_the_connection_closes(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], silent) as w,
    ):
        assert w.ws is not None
        sent = 0
        with contextlib.suppress(websockets.ConnectionClosed):
            for _ in range(1000):
                await w.ws.send("not a frame {")
                sent += 1
        deadline = time.monotonic() + 20
        while w.ws.close_code is None:
            assert time.monotonic() < deadline, "the connection stayed open"
            await asyncio.sleep(0.02)
        assert w.ws.close_code == 1008
        log = (srv.directory / "server.log").read_text()
        assert 0 < log.count("refused a unreadable frame") <= 20, log[-2000:]


async def wait_tasks(w: RawWorker, count: int) -> None:
    deadline = time.monotonic() + 20
    while len(w.tasks) < count:
        assert time.monotonic() < deadline, f"{len(w.tasks)} of {count} tasks arrived"
        await asyncio.sleep(0.02)


async def test_a_batch_with_a_garbled_frame_still_delivers_its_other_frames(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], silent, batches=True) as w,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        assert w.welcome is not None and w.welcome.accepts_batches
        await start(http, "good")
        await wait_tasks(w, 1)
        await start(http, "bad")
        await wait_tasks(w, 2)
        by_flow = {t.flow_id: t for t in w.tasks}
        done = DecisionSpec(kind="graceful_complete", output=raw("fine"))
        good = encoder.encode(
            ResultFrame(result=TaskResult(task_id=by_flow["good"].task_id, decision=done))
        )
        bad = encoder.encode(
            {"type": "result", "result": {"task_id": by_flow["bad"].task_id, "decision": 5}}
        )
        await w.send_raw(encode_batch([good, bad]))
        good_res, bad_res = await result_of(http, "good"), await result_of(http, "bad")
        assert good_res["status"] == "completed", good_res
        assert bad_res["status"] == "failed", bad_res
        assert "BAD_REQUEST" in str(bad_res["error_message"]), bad_res
        assert len(w.tasks) == 2  # neither delivered again
        assert w.ws is not None and w.ws.close_code is None


async def test_tasks_ready_together_reach_a_batching_worker_in_one_message(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        for n in range(5):  # queued: no Worker is connected yet
            await start(http, f"queued-{n}")
        async with RawWorker(srv.address, [SPEC], silent, slots=8, batches=True) as w:
            await wait_tasks(w, 5)
            assert w.batches_received >= 1
            assert sorted(t.flow_id for t in w.tasks) == [f"queued-{n}" for n in range(5)]
        for n in range(5, 8):
            await start(http, f"queued-{n}")
        async with RawWorker(srv.address, [SPEC], silent, slots=8) as old:
            await wait_tasks(old, 3)  # a Worker that did not ask for batches gets single frames
            assert old.batches_received == 0
