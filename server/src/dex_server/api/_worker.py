"""The Worker WebSocket (``/v1/worker``): register, then tasks and frames both ways."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time
from collections import deque
from collections.abc import Awaitable, Callable

import msgspec
from dex._protocol import (
    MAX_RESUME_TASK_IDS,
    PROTOCOL_VERSION,
    CancelTask,
    ErrorCode,
    ErrorInfo,
    Heartbeat,
    HeartbeatAck,
    ReadState,
    Register,
    Registered,
    RegisterRejected,
    Reject,
    ResultFrame,
    StateValues,
    StreamWrite,
    TaskResult,
    WorkerBatch,
    WorkerFrame,
    encode_batch,
    encoder,
    worker_frame_decoder,
)
from starlette.websockets import WebSocket, WebSocketDisconnect

from dex_server._ws import DIRECT_FRAMES, DirectWebSocketProtocol
from dex_server.dispatch import WorkerConn
from dex_server.service import Runtime
from dex_server.service._common import ServiceError
from dex_server.service._reads import read_state

log = logging.getLogger("dex_server.worker")

_MAX_INSTANCE_ID = 200
# a Worker that sends this many frames the server cannot read within the window is broken
# (or hostile): the server closes its connection instead of logging every frame
MAX_BAD_FRAMES = 10
BAD_FRAME_WINDOW_S = 60.0
# frames waiting together for a Worker that reads batches leave as one message of at most
# this many frames and bytes (a larger frame goes alone)
_BATCH_MAX_FRAMES = 256
_BATCH_MAX_BYTES = 1024 * 1024


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
        if len(first.worker_instance_id) > _MAX_INSTANCE_ID:
            await _reject(
                ws,
                "BAD_REQUEST",
                f"worker_instance_id is {len(first.worker_instance_id)} characters, over the"
                f" limit of {_MAX_INSTANCE_ID}",
            )
            return
        if len(first.resume_task_ids) > MAX_RESUME_TASK_IDS:
            await _reject(
                ws,
                "BAD_REQUEST",
                f"resume_task_ids lists {len(first.resume_task_ids)} tasks, over the limit"
                f" of {MAX_RESUME_TASK_IDS}",
            )
            return
        try:
            await runtime.register_specs(first.flows)
        except ServiceError as exc:
            await _reject(ws, exc.code, exc.message)
            return
        except Exception as exc:  # the store is away or refused: the Worker tries again later
            log.warning("registering worker %s failed: %s", first.app_worker_id, exc)
            await _reject(ws, ErrorCode.UNAVAILABLE, f"the server cannot record the Flows: {exc}")
            return
        conn = WorkerConn(
            first.app_worker_id,
            {f.flow_type for f in first.flows},
            first.max_concurrent_tasks,
            first.reserved_rpc_tasks,
            first.worker_instance_id,
        )
        sender: asyncio.Task[None] | None = None
        direct = ws.scope.get("extensions", {}).get(DIRECT_FRAMES)
        try:
            # before Registered: the Worker learns which of its tasks are still its own
            resumed = runtime.dispatcher.resume(conn, first.resume_task_ids)
            await ws.send_text(
                encoder.encode(
                    Registered(
                        server_version="0.1.0",
                        blob_threshold_bytes=runtime.config.blob_threshold_bytes,
                        max_frame_bytes=runtime.config.max_worker_frame_bytes,
                        resumed_task_ids=resumed,
                        reconnect_grace_s=runtime.dispatcher.reconnect_grace_s,
                        accepts_batches=True,
                    )
                ).decode()
            )
            if resumed:
                log.info("worker %s resumed %d task(s)", conn.app_worker_id, len(resumed))
            if isinstance(direct, DirectWebSocketProtocol):
                direct_sender = _DirectSender(direct, batches=first.accepts_batches)
                conn.deliver, conn.flush = direct_sender.push, direct_sender.flush
            else:
                sender = asyncio.create_task(_send_loop(ws, conn, batches=first.accepts_batches))
            # the rest are not this Worker's any more (ended, timed out, cancelled, elsewhere)
            for task_id in set(first.resume_task_ids).difference(resumed):
                conn.send(CancelTask(task_id=task_id, reason="not held for this Worker"))
            runtime.worker_registered(conn, first.flows)
            await _receive_loop(ws, conn, runtime, direct)
        except WebSocketDisconnect:
            pass
        finally:
            runtime.dispatcher.unregister(conn)
            conn.outbox.put_nowait(None)
            if sender is not None:
                with contextlib.suppress(Exception):
                    await sender

    return endpoint


async def _reject(ws: WebSocket, code: str, message: str) -> None:
    with contextlib.suppress(Exception):
        await ws.send_text(encoder.encode(RegisterRejected(code=code, message=message)).decode())
        await ws.close(code=1008)


def _pack(frames: list[bytes], batches: bool) -> list[bytes]:
    """The messages that carry ``frames``, in order.

    Batches of at most ``_BATCH_MAX_FRAMES`` frames and ``_BATCH_MAX_BYTES``; a larger
    frame goes alone, and so does every frame for a Worker that does not read batches.
    """
    if not batches or len(frames) == 1:
        return frames
    messages: list[bytes] = []
    group: list[bytes] = []
    room = _BATCH_MAX_BYTES
    for frame in frames:
        if group and (len(group) >= _BATCH_MAX_FRAMES or len(frame) + 1 > room):
            messages.append(group[0] if len(group) == 1 else encode_batch(group))
            group, room = [], _BATCH_MAX_BYTES
        group.append(frame)
        room -= len(frame) + 1
    messages.append(group[0] if len(group) == 1 else encode_batch(group))
    return messages


async def _send_loop(ws: WebSocket, conn: WorkerConn, *, batches: bool) -> None:
    outbox = conn.outbox
    while True:
        data = await outbox.get()
        if data is None:
            return
        # everything queued meanwhile (tasks a commit made ready, acks) leaves together
        frames = [data]
        closing = False
        while not outbox.empty():
            nxt = outbox.get_nowait()
            if nxt is None:
                closing = True
                break
            frames.append(nxt)
        try:
            for message in _pack(frames, batches):
                await ws.send_text(message.decode())
        except Exception:
            return
        if closing:
            return


class _DirectSender:
    """Sends a Worker's frames on its :class:`DirectWebSocketProtocol`, without a task.

    Frames sent during one pass of the event loop (the tasks a commit made ready, acks)
    leave together at the start of the next, batched like ``_send_loop`` does.
    """

    def __init__(self, link: DirectWebSocketProtocol, *, batches: bool) -> None:
        self._link = link
        self._batches = batches
        self._pending: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def push(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def flush(self) -> None:
        """Write the held frames (at the end of the loop pass, or now when called)."""
        frames, self._pending = self._pending, []
        if not frames:  # already written by an earlier call
            return
        for message in _pack(frames, self._batches):
            if not self._link.write_text(message):
                return


async def _receive_loop(
    ws: WebSocket, conn: WorkerConn, runtime: Runtime, direct: object = None
) -> None:
    """Handle the Worker's messages until it disconnects.

    With a :class:`DirectWebSocketProtocol` the messages reach ``_on_message`` straight
    from the protocol and this only waits for the disconnect (and takes any message that
    was queued before the switch).
    """
    bad = _BadFrames()

    def on_message(data: str | bytes) -> bool:
        if not _on_message(data, conn, runtime, bad):
            return False
        log.warning(
            "closing the connection of worker %s: %d unreadable frames within %gs",
            conn.app_worker_id,
            MAX_BAD_FRAMES,
            BAD_FRAME_WINDOW_S,
        )
        return True

    if isinstance(direct, DirectWebSocketProtocol):
        link = direct

        def sink(data: bytes) -> None:
            if on_message(data):
                link.close_now(1008, "too many unreadable frames")

        link.attach(sink)
    while True:
        msg = await ws.receive()
        if msg["type"] == "websocket.disconnect":
            return
        data = msg.get("text") or msg.get("bytes")
        if data and on_message(data):
            with contextlib.suppress(Exception):
                await ws.close(code=1008, reason="too many unreadable frames")
            return


def _on_message(data: str | bytes, conn: WorkerConn, runtime: Runtime, bad: _BadFrames) -> bool:
    """Act on one message of a registered Worker; whether to close its connection now."""
    if not data:
        return False
    limit = runtime.config.max_worker_frame_bytes
    if len(data) > limit:
        _refuse_frame(
            runtime,
            conn,
            data,
            ErrorCode.LIMIT_EXCEEDED,
            f"the Worker's frame is {len(data)} bytes, over the limit"
            f" max_worker_frame_bytes={limit}",
        )
        return False
    try:
        frame = worker_frame_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        # a batch with one bad frame: the others still count, each on its own
        inner = _raw_batch(data)
        parts = [bytes(raw) for raw in inner] if inner is not None else [data]
        for part in parts:
            if _decode_one(part, conn, runtime, exc if inner is None else None, bad):
                return True
        return False
    if isinstance(frame, WorkerBatch):
        for one in frame.frames:
            _handle(one, conn, runtime)
    else:
        _handle(frame, conn, runtime)
    return False


class _RawBatch(msgspec.Struct, tag="batch"):
    frames: list[msgspec.Raw]


_raw_batch_decoder = msgspec.json.Decoder(_RawBatch)


def _raw_batch(data: str | bytes) -> list[msgspec.Raw] | None:
    """The frames of a batch that failed to decode as a whole (None: not a batch)."""
    try:
        return _raw_batch_decoder.decode(data).frames
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def _decode_one(
    data: str | bytes,
    conn: WorkerConn,
    runtime: Runtime,
    error: Exception | None,
    bad: _BadFrames,
) -> bool:
    """Handle one frame (``error``: it is known not to decode); whether to close now."""
    if error is None:
        try:
            frame = worker_frame_decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            error = exc
        else:
            if isinstance(frame, WorkerBatch | Register):
                error = ValueError(f"a {type(frame).__name__} frame inside a batch")
            else:
                _handle(frame, conn, runtime)
                return False
    _refuse_frame(
        runtime, conn, data, ErrorCode.BAD_REQUEST, f"the Worker sent a bad frame: {error}"
    )
    return bad.too_many()


def _handle(frame: WorkerFrame, conn: WorkerConn, runtime: Runtime) -> None:
    """Act on one decoded frame of a registered Worker."""
    if isinstance(frame, ResultFrame):
        runtime.on_result(conn, frame.result)
    elif isinstance(frame, Heartbeat):
        inflight = runtime.dispatcher.get(conn, frame.task_id)
        if inflight is not None and frame.has_value:
            inflight.heartbeat_value = frame.value
        if frame.durable:  # answered even for an unknown task: the Worker waits
            runtime._spawn(
                runtime.durable_heartbeat(
                    conn, frame.task_id, frame.seq, frame.value if frame.has_value else None
                )
            )
    elif isinstance(frame, StreamWrite):
        inflight = runtime.dispatcher.get(conn, frame.task_id)
        if inflight is None or inflight.env.execution_id is None:
            return
        runtime.step_stream_write(
            inflight.env.flow_type,
            frame.stream,
            inflight.env.task.flow_id if inflight.env.task is not None else "",
            bytes(frame.value),
            f"#{inflight.env.execution_id}",
        )
    elif isinstance(frame, ReadState):
        runtime._spawn(read_state(runtime, conn, frame))
    elif isinstance(frame, Reject):
        runtime.dispatcher.reject(conn, frame.task_id)


class _BadFrames:
    """When a connection's unreadable frames came in, over the last window."""

    def __init__(self) -> None:
        self._times: deque[float] = deque()

    def too_many(self) -> bool:
        """Count one more; whether the window now holds ``MAX_BAD_FRAMES``."""
        now = time.monotonic()
        self._times.append(now)
        while self._times[0] < now - BAD_FRAME_WINDOW_S:
            self._times.popleft()
        return len(self._times) >= MAX_BAD_FRAMES


class _ResultHead(msgspec.Struct):
    task_id: str = ""


class _FrameHead(msgspec.Struct):
    """What identifies a frame's task, read from a frame that failed to decode."""

    type: str = ""
    task_id: str = ""
    request_id: int = 0
    durable: bool = False
    seq: int = 0
    result: _ResultHead | None = None


_head_decoder = msgspec.json.Decoder(_FrameHead)
_TASK_ID = re.compile(r'"task_id"\s*:\s*"([^"\\]{1,200})"')
_TYPE = re.compile(r'"type"\s*:\s*"([a-z_]{1,40})"')


def _head(data: str | bytes) -> _FrameHead:
    try:
        return _head_decoder.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError):
        pass
    # not JSON at all (cut off, garbage): look for the fields near the start
    text = data[:65536] if isinstance(data, str) else data[:65536].decode("utf-8", "replace")
    task = _TASK_ID.search(text)
    kind = _TYPE.search(text)
    return _FrameHead(type=kind.group(1) if kind else "", task_id=task.group(1) if task else "")


def _refuse_frame(
    runtime: Runtime, conn: WorkerConn, data: str | bytes, code: str, message: str
) -> None:
    """Answer a frame the server cannot take with an error for its task, when it names one.

    A result fails its attempt with ``code``, for good: neither a redelivery nor a retry
    would help, the Worker would send the same frame again. A durable heartbeat or a state
    read gets an error answer; anything else is only logged.
    """
    head = _head(data)
    task_id = head.task_id or (head.result.task_id if head.result is not None else "")
    log.warning(
        "refused a %s frame for task %r from worker %s: %s",
        head.type or "unreadable",
        task_id,
        conn.app_worker_id,
        message,
    )
    if not task_id:
        return
    if head.type in ("result", ""):
        if conn.tasks.get(task_id) is not None:
            error = ErrorInfo(error_type=code, message=message, non_retryable=True)
            runtime.on_result(conn, TaskResult(task_id=task_id, error=error))
    elif head.type == "heartbeat" and head.durable:
        conn.send(HeartbeatAck(task_id=task_id, seq=head.seq, error_code=code, error=message))
    elif head.type == "read_state":
        conn.send(
            StateValues(task_id=task_id, request_id=head.request_id, error_code=code, error=message)
        )
