"""The Worker's session with the server: receives tasks, runs them, sends frames.

One ``Session`` lives as long as its Worker and serves one WebSocket at a time. All frames
leave through one writer task in the order they were queued, so a task's heartbeats and
Stream writes always reach the server before its result. Handlers run as asyncio tasks on
the Worker's loop (``invoke`` moves sync handlers to threads itself).

When the connection drops, running handlers go on: their frames are buffered, durable
heartbeats and state reads wait. The next registration lists them (``resume_task_ids``);
the tasks the server resumes get their buffered frames on the new connection, the others
are cancelled. Without a new registration within twice the server's grace period they
are cancelled too (the server no longer holds them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from msgspec import Raw
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed
from websockets.frames import Frame, Opcode
from websockets.protocol import Protocol, State

from dex._protocol import (
    MAX_RESUME_TASK_IDS,
    CancelTask,
    ErrorCode,
    ErrorInfo,
    Heartbeat,
    HeartbeatAck,
    ReadState,
    Registered,
    RegisterRejected,
    Reject,
    ResultFrame,
    ServerBatch,
    ServerFrame,
    StateValues,
    StreamWrite,
    Task,
    TaskFrame,
    TaskResult,
    encode_batch,
    encoder,
    server_frame_decoder,
)
from dex._worker._deadlines import Deadlines
from dex._worker._inline import InlineExecutes
from dex._worker._logs import attempt_failure_line, task_log
from dex._wsframes import (
    DirectFrames,
    frames_sendable,
    message_limit,
    sansio_ready,
    text_frame,
)
from dex.errors import error_from_code

if TYPE_CHECKING:
    from dex._worker._async_worker import AsyncWorker

log = logging.getLogger("dex.worker")

# A handler still running this long after its deadline is cancelled by the Worker; the
# server has already timed the attempt out by then.
_DEADLINE_GRACE_S = 1.0
# A result written this recently when the connection closed may not have reached the
# server: the next registration offers it again (at most max_tasks of them, and this much).
_RESULT_RESEND_WINDOW_S = 10.0
_RESULT_RESEND_MAX_BYTES = 32 * 1024 * 1024
# The largest frame a server that does not announce its limit accepts (its default).
_DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024
# Frames waiting together leave as one batch of at most this many frames and bytes (and
# never more than the server's frame limit): small frames share a message, large ones
# go alone.
_BATCH_MAX_FRAMES = 256
_BATCH_MAX_BYTES = 1024 * 1024


class SessionLostError(ConnectionError):
    """The connection to the server closed while a task waited on it."""


_DATA_OPCODES = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


class DirectConnection(DirectFrames, ClientConnection):
    """websockets' asyncio client connection that can hand each message to a callback.

    With ``sink`` set, every complete data message goes to it from the connection's read
    callback (as bytes; JSON decodes from them), past the message queue and the reader's
    wake-up; the common frames are parsed and built directly (``dex._wsframes``), while
    pings, the close handshake, limits and keepalive stay websockets'. A ``sink`` that
    raises ends the connection and is kept in ``sink_error``.
    """

    _MASKED = False
    sink: Callable[[bytes], None] | None = None
    sink_error: Exception | None = None
    _parts: list[bytes]

    def send_text_now(self, data: bytes) -> None:
        """Write ``data`` as one text message now (the connection must be open)."""
        if frames_sendable(self.protocol):
            self.transport.write(text_frame(data, masked=True))
        else:
            self.protocol.send_text(data)
            self.send_data()

    def _direct_protocol(self) -> Protocol:
        return self.protocol

    def _direct_ready(self) -> bool:
        return self.sink is not None and sansio_ready(self.protocol)

    def _direct_limit(self) -> int | None:
        return message_limit(self.protocol)

    def _direct_message(self, data: bytes) -> bool:
        self._hand(data)
        return self.sink is not None

    def process_event(self, event: Any) -> None:
        sink = self.sink
        if sink is None or not isinstance(event, Frame) or event.opcode not in _DATA_OPCODES:
            super().process_event(event)
            return
        if event.opcode is not Opcode.CONT:
            self._parts = []
        self._parts.append(bytes(event.data))
        if not event.fin:
            return
        parts, self._parts = self._parts, []
        self._hand(parts[0] if len(parts) == 1 else b"".join(parts))

    def _hand(self, data: bytes) -> None:
        sink = self.sink
        if sink is None:
            return
        try:
            sink(data)
        except Exception as exc:
            self.sink, self.sink_error = None, exc
            self.transport.abort()


def _buffered(ws: ClientConnection) -> int | None:
    """Frames websockets holds for ``recv()`` (None: this version keeps them elsewhere)."""
    frames = getattr(getattr(ws, "recv_messages", None), "frames", None)
    return len(frames) if frames is not None and hasattr(frames, "__len__") else None


class _TaskIO:
    """The ``dex._invoke.TaskIO`` of one task on this session."""

    __slots__ = ("_seq", "_session", "cancelled", "task_id", "timed_out")

    def __init__(self, session: Session, task_id: str) -> None:
        self._session = session
        self.task_id = task_id
        self._seq = 0
        self.cancelled = False
        self.timed_out = False  # cancelled by the session's deadline timer

    async def heartbeat(self, value: bytes | None, *, has_value: bool, durable: bool) -> None:
        self._seq += 1
        frame = Heartbeat(
            task_id=self.task_id,
            value=None if value is None else Raw(value),
            has_value=has_value,
            durable=durable,
            seq=self._seq,
        )
        data = self._session.encode_within_limit(frame, "heartbeat")
        if not durable:
            self._session.send_encoded(data, self.task_id)
            # once written, the server counts this attempt as started even if the Worker
            # dies before its next loop pass (say, inside code that blocks the loop); on
            # the direct path it is written here and now, without waiting for that pass
            if not self._session.flush_now():
                await self._session.flushed()
            return
        ack = self._session.expect_ack(self.task_id, self._seq, data)
        self._session.send_encoded(data, self.task_id)
        await ack

    async def read_state(
        self,
        map_name: str,
        *,
        names: list[str] | None,
        start: str | None,
        end: str | None,
        limit: int | None,
    ) -> StateValues:
        return await self._session.read_state(
            ReadState(
                task_id=self.task_id,
                request_id=0,
                map=map_name,
                names=names,
                start=start,
                end=end,
                limit=limit,
            )
        )

    def stream_write(self, stream: str, value: bytes) -> None:
        frame = StreamWrite(task_id=self.task_id, stream=stream, value=Raw(value))
        data = self._session.encode_within_limit(frame, "Stream write")
        self._session.send_encoded(data, self.task_id)

    def is_cancelled(self) -> bool:
        return self.cancelled


class Session:
    """The Worker's tasks and outgoing frames, served over one WebSocket at a time."""

    def __init__(self, worker: AsyncWorker) -> None:
        self._worker = worker
        self._ws: ClientConnection | None = None
        # (task ID, frame, is a result); kept across a disconnect for the tasks resumed
        self._out: deque[tuple[str, bytes, bool]] = deque()
        self._out_ready = asyncio.Event()
        self._flushed = asyncio.Event()
        self._flushed.set()
        # requests waiting for an answer, with their frame: sent again after a resume
        self._acks: dict[tuple[str, int], tuple[asyncio.Future[None], bytes]] = {}
        self._reads: dict[int, tuple[asyncio.Future[StateValues], str, bytes]] = {}
        self._read_ids = 0
        self._tasks: dict[str, tuple[asyncio.Task[None], _TaskIO]] = {}
        self._deadlines = Deadlines(self._deadline_passed)
        self._inline = InlineExecutes(worker.registry)
        self._steps_running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        # results written lately: one may not have reached the server when the connection
        # closed, so the next registration offers them again (task ID -> (when, frame))
        self._sent_results: dict[str, tuple[float, bytes]] = {}
        self._sent_bytes = 0
        self._connections = 0
        self._grace_s = 0.0
        self._max_frame = _DEFAULT_MAX_FRAME_BYTES
        self._batches = False  # the server reads WorkerBatch frames
        # the connection frames are written to from a callback, not by the writer task
        self._direct: DirectConnection | None = None
        self._flush_due = False

    @property
    def connected(self) -> bool:
        """Whether a registered connection serves the session now."""
        return self._ws is not None

    # ------------------------------------------------------------------ registration

    async def register(self, ws: ClientConnection, timeout: float) -> Registered:
        """Send ``Register`` on ``ws``, wait for the answer, and serve on ``ws`` from now.

        Raises:
            RegistrationRejectedError: the server refused this Worker.

        """
        frame = self._worker.register_frame(self._resume_task_ids())
        await ws.send(encoder.encode(frame), text=True)
        async with asyncio.timeout(timeout):
            while True:
                answer = server_frame_decoder.decode(await ws.recv())
                if isinstance(answer, Registered):
                    if answer.max_frame_bytes > 0:
                        self._max_frame = answer.max_frame_bytes
                    self._grace_s = max(0.0, answer.reconnect_grace_s)
                    self._batches = answer.accepts_batches
                    self._attach(ws, set(answer.resumed_task_ids))
                    return answer
                if isinstance(answer, RegisterRejected):
                    raise RegistrationRejectedError(answer.code, answer.message)
                log.warning("ignoring %s frame before registration", type(answer).__name__)

    def _resume_task_ids(self) -> list[str]:
        # running tasks first: past the limit, a result not offered again only risks its
        # attempt's retry (as without resuming)
        ids = dict.fromkeys(self._tasks)
        ids.update((task_id, None) for task_id, _, is_result in self._out if is_result)
        ids.update(dict.fromkeys(self._sent_results))
        return list(ids)[:MAX_RESUME_TASK_IDS]

    def _attach(self, ws: ClientConnection, resumed: set[str]) -> None:
        """Serve on ``ws``: keep the frames of the ``resumed`` tasks, stop the others."""
        for task_id in list(self._tasks):
            if task_id not in resumed:
                log.info("task %s was not resumed by the server: cancelling it", task_id)
                self._cancel(task_id)
        delivered = self._keep_frames(resumed)
        self._repeat_requests(resumed)
        for task_id in resumed - delivered - self._tasks.keys():
            # resumed, but it stopped meanwhile (its grace ran out here): fail the attempt
            error = ErrorInfo(
                error_type="WORKER_CONNECTION_LOST",
                message="the Worker stopped the task while its connection was down",
            )
            data = encoder.encode(ResultFrame(result=TaskResult(task_id=task_id, error=error)))
            self._out.append((task_id, data, True))
        self._ws = ws
        self._connections += 1
        if self._out:
            self._flushed.clear()
            self._out_ready.set()

    def _keep_frames(self, resumed: set[str]) -> set[str]:
        """Queue the resumed tasks' results written lately, then their waiting frames.

        Returns the tasks whose result is queued.
        """
        old, self._out = self._out, deque()
        delivered: set[str] = set()
        for task_id, (_, data) in self._sent_results.items():
            if task_id in resumed:
                self._out.append((task_id, data, True))
                delivered.add(task_id)
        self._sent_results.clear()
        self._sent_bytes = 0
        for item in old:
            if item[0] in resumed:
                self._out.append(item)
                if item[2]:
                    delivered.add(item[0])
        return delivered

    def _repeat_requests(self, resumed: set[str]) -> None:
        """Send unanswered durable heartbeats and reads of resumed tasks again; fail the rest."""
        queued = {id(item[1]) for item in self._out}  # not sent yet: no need to repeat
        for key, (ack, data) in list(self._acks.items()):
            if key[0] not in resumed:
                del self._acks[key]
                _lost(ack)
            elif id(data) not in queued:
                self._out.append((key[0], data, False))
        for request_id, (read, task_id, data) in list(self._reads.items()):
            if task_id not in resumed:
                del self._reads[request_id]
                _lost(read)
            elif id(data) not in queued:
                self._out.append((task_id, data, False))

    # ------------------------------------------------------------------ main loop

    async def serve(self) -> None:
        """Run until the connection closes; running tasks then wait for a reconnect."""
        ws = self._ws
        assert ws is not None
        if isinstance(ws, DirectConnection) and _buffered(ws) is not None:
            await self._serve_direct(ws)
            return
        writer = asyncio.create_task(self._write_loop(ws), name="dex-worker-writer")
        try:
            async for message in ws:
                self._on_frame(message)
        except ConnectionClosed:
            pass
        finally:
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            self._detach()

    async def _serve_direct(self, ws: DirectConnection) -> None:
        """``serve`` with the frames handled in ws's read callback and written at once."""
        try:
            # what came with Registered waits in websockets' buffer: it goes first
            while _buffered(ws):
                self._on_frame(await ws.recv())
            ws.sink = self._on_frame
            self._direct = ws
            self._flush_soon()
            await ws.wait_closed()
        except ConnectionClosed:
            pass
        finally:
            ws.sink = None
            self._direct = None
            self._detach()
        if ws.sink_error is not None:
            raise ws.sink_error

    def _flush_soon(self) -> None:
        if not self._flush_due and self._out:
            self._flush_due = True
            asyncio.get_running_loop().call_soon(self._flush_direct)

    def flush_now(self) -> bool:
        """Write what is queued now, on the direct path; whether nothing is left queued."""
        if self._direct is None or self._ws is not self._direct:
            return False
        self._flush_direct()
        return not self._out

    def _flush_direct(self) -> None:
        """Write what is queued (batched like ``_write_loop``) on the direct connection."""
        self._flush_due = False
        ws = self._direct
        if ws is None or self._ws is not ws:
            return
        while self._out:
            if ws.protocol.state is not State.OPEN:
                return  # closing: the frames wait for the next connection (see serve)
            items, message = self._next_message()
            try:
                ws.send_text_now(message)
            except Exception:
                self._unsent(items)
                ws.transport.abort()
                return
        self._flushed.set()

    def _detach(self) -> None:
        self._ws = None
        self._inline.forget()
        self._flushed.set()
        if self._grace_s <= 0 or self._worker.stopping:
            self.abandon()
        elif self._tasks or self._out or self._sent_results:
            # the server's grace period starts when it sees the close, which may be later
            # than here: keep the tasks twice as long (a late resume is refused, no harm)
            connection = self._connections
            asyncio.get_running_loop().call_later(2 * self._grace_s, self._expire, connection)

    def _expire(self, connection: int) -> None:
        """No new registration within the server's grace period: stop everything."""
        if self._ws is None and self._connections == connection:
            if self._tasks:
                log.warning(
                    "cancelling %d task(s): no reconnect within %.1fs",
                    len(self._tasks),
                    self._grace_s,
                )
            self.abandon()

    def _on_frame(self, message: str | bytes) -> None:
        frame = server_frame_decoder.decode(message)
        if isinstance(frame, ServerBatch):
            for inner in frame.frames:
                self._on_decoded(inner)
        else:
            self._on_decoded(frame)

    def _on_decoded(self, frame: ServerFrame) -> None:
        if isinstance(frame, TaskFrame):
            self._on_task(frame.task)
        elif isinstance(frame, HeartbeatAck):
            entry = self._acks.pop((frame.task_id, frame.seq), None)
            if entry is not None and not entry[0].done():
                if frame.error_code is None:
                    entry[0].set_result(None)
                else:  # the start was not recorded: the handler sees why
                    entry[0].set_exception(
                        error_from_code(
                            frame.error_code,
                            frame.error or "start not recorded",
                            operation="heartbeat",
                        )
                    )
        elif isinstance(frame, StateValues):
            read = self._reads.pop(frame.request_id, None)
            if read is not None and not read[0].done():
                read[0].set_result(frame)
        elif isinstance(frame, CancelTask):
            self._cancel(frame.task_id)
        else:
            log.warning("unexpected %s frame", type(frame).__name__)

    def _on_task(self, task: Task) -> None:
        worker = self._worker
        worker.stats.tasks_received += 1
        reason: Any = None
        if worker.stopping:
            reason = "stopping"
        elif task.flow_type not in worker.flow_types:
            reason = "unknown_name"
        elif task.task_id in self._tasks or len(self._tasks) >= worker.max_tasks:
            reason = "no_capacity"
        elif task.kind != "rpc" and self._steps_running >= worker.max_step_tasks:
            reason = "no_capacity"
            worker.stats.reserved_rpc_declines += 1
        if reason is not None:
            worker.stats.tasks_rejected += 1
            self.send(Reject(task_id=task.task_id, reason=reason), task.task_id)
            return
        io = _TaskIO(self, task.task_id)
        self._inline.on_task(task)
        if task.kind != "rpc":
            self._steps_running += 1
        handle = asyncio.create_task(self._run(task, io), name=f"dex-task-{task.task_id}")
        self._tasks[task.task_id] = (handle, io)
        self._idle.clear()

    async def _run(self, task: Task, io: _TaskIO) -> None:
        worker = self._worker
        result: TaskResult | None = None
        try:
            if task.blob_refs or task.input_blob:
                task = await worker.blobs.resolve(task)
            if task.deadline > 0:
                remaining = task.deadline - time.time() + _DEADLINE_GRACE_S
                loop = asyncio.get_running_loop()
                self._deadlines.watch(task.task_id, loop.time() + max(remaining, 0.0))
                try:
                    result = await worker.invoke(task, io)
                finally:
                    self._deadlines.forget(task.task_id)
                if io.timed_out and (current := asyncio.current_task()) is not None:
                    current.uncancel()  # the handler took the cancel and returned anyway
            else:
                result = await worker.invoke(task, io)
        except asyncio.CancelledError:
            # the deadline timer's cancel, unless another one came too (then it stands)
            current = asyncio.current_task()
            if io.timed_out and not io.cancelled and current is not None:
                if current.uncancel() > 0:
                    raise
                result = _error_result(task, "TaskDeadlineExceeded", "the task's deadline passed")
            elif not io.cancelled:
                raise
        except SessionLostError:
            io.cancelled = True
        except Exception as exc:  # invoke turns user errors into results; this is ours
            log.exception("task %s failed inside the Worker", task.task_id)
            result = _error_result(task, type(exc).__name__, str(exc), traceback.format_exc())
        finally:
            self._tasks.pop(task.task_id, None)
            if task.kind != "rpc":
                self._steps_running -= 1
            if not self._tasks:
                self._idle.set()
        if io.cancelled or result is None:
            worker.stats.tasks_cancelled += 1
            return
        if result.error is not None:
            level, text = attempt_failure_line(task, result.error, worker.retry_policy(task))
            task_log.log(level, text)
        worker.stats.tasks_completed += 1
        await self._inline.before_send(task, result, worker.invoke)
        self.send_encoded(self._result_frame(result), task.task_id, result=True)

    def _result_frame(self, result: TaskResult) -> bytes:
        """The encoded result, or a ``LIMIT_EXCEEDED`` error result when it is too large.

        A frame over the server's limit would close the connection and the task would come
        back; the error fails the attempt instead (not retried: the result would not fit).
        """
        data = encoder.encode(ResultFrame(result=result))
        if len(data) <= self._max_frame:
            return data
        if result.inline_execute is not None:  # an extra: the result goes without it
            result.inline_execute = None
            return self._result_frame(result)
        message = (
            f"the task's result is {len(data)} bytes, over the limit"
            f" max_worker_frame_bytes={self._max_frame}"
        )
        log.error("task %s: %s", result.task_id, message)
        error = ErrorInfo(error_type=ErrorCode.LIMIT_EXCEEDED, message=message, non_retryable=True)
        return encoder.encode(ResultFrame(result=TaskResult(task_id=result.task_id, error=error)))

    def _deadline_passed(self, task_id: str) -> None:
        self._cancel(task_id, deadline=True)

    def _cancel(self, task_id: str, *, deadline: bool = False) -> None:
        entry = self._tasks.get(task_id)
        if entry is None:
            return
        handle, io = entry
        if deadline:  # the handler's result becomes TaskDeadlineExceeded
            io.timed_out = True
        else:  # nothing is sent for it
            io.cancelled = True
        handle.cancel()

    def abandon(self) -> None:
        """Cancel every running task and drop every frame not sent yet."""
        for ack, _ in self._acks.values():
            _lost(ack)
        self._acks.clear()
        for read, _, _ in self._reads.values():
            _lost(read)
        self._reads.clear()
        for task_id in list(self._tasks):
            self._cancel(task_id)
        self._out.clear()
        self._sent_results.clear()
        self._sent_bytes = 0

    # ------------------------------------------------------------------ sending

    async def flushed(self) -> None:
        """Wait until every frame queued so far was written to the connection.

        Returns at once while disconnected: the frames then wait for the next connection.
        """
        if self._ws is not None:
            await self._flushed.wait()

    def send(self, frame: Any, task_id: str) -> None:
        """Queue a frame of ``task_id``; it is sent after every frame queued before it."""
        self.send_encoded(encoder.encode(frame), task_id)

    def send_encoded(self, data: bytes, task_id: str, *, result: bool = False) -> None:
        """Queue an encoded frame; while disconnected it waits for the task's resume."""
        self._out.append((task_id, data, result))
        if self._ws is not None:
            self._flushed.clear()
            if self._direct is not None:
                self._flush_soon()
            else:
                self._out_ready.set()

    def encode_within_limit(self, frame: Any, what: str) -> bytes:
        """Encode ``frame`` for a handler's call.

        Raises:
            LimitExceededError: the frame is larger than the server accepts.

        """
        data = encoder.encode(frame)
        if len(data) > self._max_frame:
            raise error_from_code(
                ErrorCode.LIMIT_EXCEEDED,
                f"the {what} frame is {len(data)} bytes, over the limit"
                f" max_worker_frame_bytes={self._max_frame}",
                operation=what,
            )
        return data

    def expect_ack(self, task_id: str, seq: int, data: bytes) -> asyncio.Future[None]:
        """A future for the answer to the durable heartbeat ``data`` (sent by the caller)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._acks[(task_id, seq)] = (fut, data)
        return fut

    async def read_state(self, request: ReadState) -> StateValues:
        """Send ``request`` (with a fresh request ID) and return the server's answer.

        Blob references in the answer are resolved into ``values``. A read pending when
        the connection drops is sent again after the task's resume.

        Raises:
            SessionLostError: the task was not resumed after the connection closed.
            DexServiceError: the server refused the read.

        """
        self._read_ids += 1
        request.request_id = self._read_ids
        fut: asyncio.Future[StateValues] = asyncio.get_running_loop().create_future()
        data = encoder.encode(request)
        self._reads[request.request_id] = (fut, request.task_id, data)
        try:
            self.send_encoded(data, request.task_id)
            answer = await fut
        finally:
            self._reads.pop(request.request_id, None)
        if answer.error_code is not None:
            raise error_from_code(
                answer.error_code, answer.error or "state read refused", operation="read_state"
            )
        if answer.blob_refs:
            refs = list(answer.blob_refs.items())
            blobs = await asyncio.gather(*(self._worker.blobs.get(h) for _, h in refs))
            for (name, _), data in zip(refs, blobs, strict=True):
                answer.values[name] = Raw(data)
            answer.blob_refs = {}
        return answer

    async def _write_loop(self, ws: ClientConnection) -> None:
        while True:
            await self._out_ready.wait()
            self._out_ready.clear()
            while self._out:
                items, message = self._next_message()
                try:
                    await ws.send(message, text=True)
                except ConnectionClosed:
                    self._unsent(items)
                    return
            self._flushed.set()

    def _next_message(self) -> tuple[list[tuple[str, bytes, bool]], bytes]:
        """The next frames to send and their message; their results count as sent."""
        items = self._take_batch()
        for task_id, data, is_result in items:
            if is_result:
                self._remember_result(task_id, data)
        message = items[0][1] if len(items) == 1 else encode_batch([i[1] for i in items])
        return items, message

    def _unsent(self, items: list[tuple[str, bytes, bool]]) -> None:
        """Frames the connection did not take: they wait for the next connection."""
        self._out.extendleft(reversed(items))
        for task_id, _, is_result in items:
            if is_result:
                self._forget_result(task_id)

    def _take_batch(self) -> list[tuple[str, bytes, bool]]:
        """The next frames to send as one message (one, without the server's batch support)."""
        items = [self._out.popleft()]
        if not self._batches:
            return items
        room = min(self._max_frame, _BATCH_MAX_BYTES) - 64 - len(items[0][1])
        while self._out and len(items) < _BATCH_MAX_FRAMES:
            size = len(self._out[0][1]) + 1
            if size > room:
                break
            room -= size
            items.append(self._out.popleft())
        return items

    def _remember_result(self, task_id: str, data: bytes) -> None:
        results = self._sent_results
        results[task_id] = (time.monotonic(), data)
        self._sent_bytes += len(data)
        horizon = time.monotonic() - _RESULT_RESEND_WINDOW_S
        while results:
            oldest = next(iter(results))
            at, old = results[oldest]
            if (
                at >= horizon
                and len(results) <= self._worker.max_tasks
                and self._sent_bytes <= _RESULT_RESEND_MAX_BYTES
            ):
                break
            del results[oldest]
            self._sent_bytes -= len(old)

    def _forget_result(self, task_id: str) -> None:
        entry = self._sent_results.pop(task_id, None)
        if entry is not None:
            self._sent_bytes -= len(entry[1])

    # ------------------------------------------------------------------ stopping

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` for running tasks, cancel the rest, flush, and close."""
        if self._tasks:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._idle.wait()
        if self._tasks:
            log.warning("cancelling %d task(s) still running after the drain", len(self._tasks))
            handles = [handle for handle, _ in self._tasks.values()]
            for task_id in list(self._tasks):
                self._cancel(task_id)
            await asyncio.gather(*handles, return_exceptions=True)
        with contextlib.suppress(TimeoutError):  # let queued results reach the server
            async with asyncio.timeout(5.0):
                await self._flushed.wait()
        ws = self._ws
        if ws is not None:
            await ws.close()

    @property
    def running(self) -> int:
        return len(self._tasks)


def _lost(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_exception(SessionLostError("connection to the Dex server lost"))
        fut.exception()


class RegistrationRejectedError(Exception):
    """The server answered ``RegisterRejected``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


def _error_result(
    task: Task, error_type: str, message: str, stack: str | None = None
) -> TaskResult:
    return TaskResult(
        task_id=task.task_id,
        error=ErrorInfo(error_type=error_type, message=message, stack=stack),
    )
