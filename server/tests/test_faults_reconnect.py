"""A Worker's WebSocket closes and the same Worker process registers again.

A real server process and raw Workers (the wire protocol, no SDK) that name their process
with ``worker_instance_id`` and list ``resume_task_ids`` when they register again. The
grace period is long here, so nothing depends on timing; the SDK's end-to-end tests
(``sdk/tests/test_e2e_worker_reconnect.py``) cut a real Worker's connection with a proxy.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import msgspec
import websockets
from dex._protocol import (
    MAX_RESUME_TASK_IDS,
    CancelTask,
    DecisionSpec,
    FlowSpec,
    Heartbeat,
    Register,
    RegisterRejected,
    ResultFrame,
    RetryPolicySpec,
    StartFlowRequest,
    StepOptionsSpec,
    StepSpec,
    Task,
    TaskResult,
    encoder,
    server_frame_decoder,
)
from dex_server.testing import running_server

from tests._rawworker import RawWorker, first_task, raw, silent

SPEC = FlowSpec(
    flow_type="Resume",
    start_step="A",
    steps=[
        StepSpec(
            step_type="A",
            options=StepOptionsSpec(execute_retry=RetryPolicySpec(maximum_attempts=1)),
        )
    ],
)
GRACE = {"worker_reconnect_grace_s": 60.0}


async def start(http: httpx.AsyncClient, flow_id: str) -> None:
    body = encoder.encode(StartFlowRequest(flow_type="Resume", flow_id=flow_id, spec=SPEC))
    assert (await http.post("/v1/flows", content=body)).status_code == 200


def complete(task: Task, output: str) -> ResultFrame:
    decision = DecisionSpec(kind="graceful_complete", output=raw(output))
    return ResultFrame(result=TaskResult(task_id=task.task_id, decision=decision))


async def result_of(http: httpx.AsyncClient, flow_id: str) -> dict[str, object]:
    body: dict[str, object] = (await http.get(f"/v1/flows/{flow_id}/result?timeout_s=20")).json()
    return body


async def test_a_task_whose_worker_disconnected_resumes_on_the_same_worker_only(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path, **GRACE) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        first = RawWorker(srv.address, [SPEC], silent, instance_id="w1")
        await first.__aenter__()
        await start(http, "resume")
        task = await first_task(first)
        # a frame was received: without a grace period the close fails the single attempt
        await first.send(Heartbeat(task_id=task.task_id))
        async with RawWorker(srv.address, [SPEC], silent, instance_id="other") as bystander:
            await first.close()
            async with RawWorker(
                srv.address, [SPEC], silent, instance_id="impostor", resume=[task.task_id]
            ) as impostor:
                assert impostor.welcome is not None
                assert impostor.welcome.resumed_task_ids == []
            async with RawWorker(
                srv.address, [SPEC], silent, instance_id="w1", resume=[task.task_id, "unknown"]
            ) as again:
                assert again.welcome is not None
                assert again.welcome.resumed_task_ids == [task.task_id]
                assert again.welcome.reconnect_grace_s == 60.0
                await again.send(complete(task, "resumed"))
                res = await result_of(http, "resume")
                assert res["status"] == "completed", res
                assert res["completions"][0]["output"] == "resumed"  # type: ignore[index]
                # held, not offered to the Workers connected meanwhile
                assert bystander.tasks == [] and impostor.tasks == [] and again.tasks == []


async def test_a_resume_while_the_old_connection_is_open_ignores_the_old_one(
    tmp_path: Path,
) -> None:
    """The server has not seen the close yet (a half-open connection): the Worker that
    registers again takes its task over, and a late frame on the old connection is ignored."""
    async with (
        running_server(tmp_path, **GRACE) as srv,
        RawWorker(srv.address, [SPEC], silent, instance_id="w1") as old,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        await start(http, "half-open")
        task = await first_task(old)
        async with RawWorker(
            srv.address, [SPEC], silent, instance_id="w1", resume=[task.task_id]
        ) as new:
            assert new.welcome is not None
            assert new.welcome.resumed_task_ids == [task.task_id]
            await old.send(complete(task, "old"))
            await new.send(complete(task, "new"))
            res = await result_of(http, "half-open")
            assert res["status"] == "completed", res
            assert res["completions"][0]["output"] == "new"  # type: ignore[index]


async def test_a_held_task_still_times_out_on_its_heartbeat_timeout(tmp_path: Path) -> None:
    """The grace period does not suspend timeouts: a held task whose heartbeat timeout
    passes fails with TIMEOUT (long before the 60 s grace period ends), and its Worker,
    registering again, gets it refused."""
    spec = FlowSpec(
        flow_type="Resume",
        start_step="A",
        steps=[
            StepSpec(
                step_type="A",
                options=StepOptionsSpec(
                    heartbeat_timeout_s=1.0, execute_retry=RetryPolicySpec(maximum_attempts=1)
                ),
            )
        ],
    )
    async with (
        running_server(tmp_path, **GRACE) as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        body = encoder.encode(StartFlowRequest(flow_type="Resume", flow_id="hb", spec=spec))
        first = RawWorker(srv.address, [spec], silent, instance_id="w1")
        await first.__aenter__()
        assert (await http.post("/v1/flows", content=body)).status_code == 200
        task = await first_task(first)
        await first.close()
        res = await result_of(http, "hb")
        assert res["status"] == "failed", res
        assert "TIMEOUT" in str(res["error_message"]), res
        async with RawWorker(
            srv.address, [spec], silent, instance_id="w1", resume=[task.task_id]
        ) as again:
            assert again.welcome is not None
            assert again.welcome.resumed_task_ids == []
            deadline = time.monotonic() + 20  # and it is told to stop the stale handler
            while not any(
                isinstance(f, CancelTask) and f.task_id == task.task_id for f in again.frames
            ):
                assert time.monotonic() < deadline, again.frames
                await asyncio.sleep(0.02)


async def test_a_registration_over_the_resume_limits_is_rejected_naming_them(
    tmp_path: Path,
) -> None:
    base = Register(app_worker_id="raw", flows=[SPEC], max_concurrent_tasks=2, reserved_rpc_tasks=1)
    too_many = [f"t{i}" for i in range(MAX_RESUME_TASK_IDS + 1)]
    cases = [
        (msgspec.structs.replace(base, worker_instance_id="x" * 201), "201 characters"),
        (
            msgspec.structs.replace(base, worker_instance_id="w", resume_task_ids=too_many),
            f"limit of {MAX_RESUME_TASK_IDS}",
        ),
    ]
    async with running_server(tmp_path) as srv:
        for register, message in cases:
            async with websockets.connect(f"ws://{srv.address}/v1/worker", max_size=None) as ws:
                await ws.send(encoder.encode(register).decode())
                answer = server_frame_decoder.decode(await ws.recv())
            assert isinstance(answer, RegisterRejected), answer
            assert answer.code == "BAD_REQUEST" and message in answer.message, answer
