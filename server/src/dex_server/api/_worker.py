"""The Worker WebSocket (``/v1/worker``): register, then tasks and frames both ways."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

import msgspec
from dex._protocol import (
    PROTOCOL_VERSION,
    Heartbeat,
    ReadState,
    Register,
    Registered,
    RegisterRejected,
    Reject,
    ResultFrame,
    StreamWrite,
    encoder,
    worker_frame_decoder,
)
from starlette.websockets import WebSocket, WebSocketDisconnect

from dex_server.dispatch import WorkerConn
from dex_server.service import Runtime
from dex_server.service._common import ServiceError
from dex_server.service._reads import read_state

log = logging.getLogger("dex_server.worker")


def worker_endpoint(runtime: Runtime) -> Callable[[WebSocket], Awaitable[None]]:
    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        try:
            first = worker_frame_decoder.decode(await ws.receive_text())
        except (msgspec.DecodeError, msgspec.ValidationError, WebSocketDisconnect, KeyError) as exc:
            await _reject(ws, "BAD_REQUEST", f"expected a register frame: {exc}")
            return
        if not isinstance(first, Register):
            await _reject(ws, "BAD_REQUEST", "the first frame must be a register frame")
            return
        if first.protocol_version != PROTOCOL_VERSION:
            await _reject(
                ws,
                "BAD_REQUEST",
                f"protocol version {first.protocol_version} is not {PROTOCOL_VERSION}",
            )
            return
        if first.max_concurrent_tasks < 1 or not (
            0 <= first.reserved_rpc_tasks < max(first.max_concurrent_tasks, 1)
            or (first.max_concurrent_tasks == 1 and first.reserved_rpc_tasks == 0)
        ):
            await _reject(
                ws,
                "BAD_REQUEST",
                "need max_concurrent_tasks >= 1 and 0 <= reserved_rpc_tasks < max_concurrent_tasks",
            )
            return
        await runtime.register_specs(first.flows)
        conn = WorkerConn(
            first.app_worker_id,
            {f.flow_type for f in first.flows},
            first.max_concurrent_tasks,
            first.reserved_rpc_tasks,
        )
        await ws.send_text(
            encoder.encode(
                Registered(
                    server_version="0.1.0", blob_threshold_bytes=runtime.config.blob_threshold_bytes
                )
            ).decode()
        )
        sender = asyncio.create_task(_send_loop(ws, conn))
        runtime.worker_registered(conn, first.flows)
        try:
            await _receive_loop(ws, conn, runtime)
        finally:
            runtime.dispatcher.unregister(conn)
            conn.outbox.put_nowait(None)
            with contextlib.suppress(Exception):
                await sender

    return endpoint


async def _reject(ws: WebSocket, code: str, message: str) -> None:
    with contextlib.suppress(Exception):
        await ws.send_text(encoder.encode(RegisterRejected(code=code, message=message)).decode())
        await ws.close(code=1008)


async def _send_loop(ws: WebSocket, conn: WorkerConn) -> None:
    while True:
        data = await conn.outbox.get()
        if data is None:
            return
        try:
            await ws.send_text(data.decode())
        except Exception:
            return


async def _receive_loop(ws: WebSocket, conn: WorkerConn, runtime: Runtime) -> None:
    while True:
        msg = await ws.receive()
        if msg["type"] == "websocket.disconnect":
            return
        data = msg.get("text") or msg.get("bytes")
        if not data:
            continue
        try:
            frame = worker_frame_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            log.warning("bad frame from worker %s: %s", conn.app_worker_id, exc)
            continue
        if isinstance(frame, ResultFrame):
            runtime.on_result(conn, frame.result)
        elif isinstance(frame, Heartbeat):
            inflight = runtime.dispatcher.get(conn, frame.task_id)
            if inflight is None:
                continue
            if frame.has_value:
                inflight.heartbeat_value = frame.value
            if frame.durable:
                runtime._spawn(
                    runtime.durable_heartbeat(
                        conn, frame.task_id, frame.seq, frame.value if frame.has_value else None
                    )
                )
        elif isinstance(frame, StreamWrite):
            inflight = runtime.dispatcher.get(conn, frame.task_id)
            if inflight is None or inflight.env.execution_id is None:
                continue
            try:
                runtime.stream_write(
                    inflight.env.flow_type,
                    frame.stream,
                    inflight.env.task.flow_id if inflight.env.task is not None else "",
                    bytes(frame.value),
                    f"#{inflight.env.execution_id}",
                )
            except ServiceError as exc:
                log.info("stream write dropped: %s", exc.message)
        elif isinstance(frame, ReadState):
            runtime._spawn(read_state(runtime, conn, frame))
        elif isinstance(frame, Reject):
            runtime.dispatcher.reject(conn, frame.task_id)
