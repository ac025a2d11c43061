"""One registered WebSocket session of a Worker: receives tasks, runs them, sends frames.

All frames leave through one writer task in the order they were queued, so a task's
heartbeats and Stream writes always reach the server before its result. Handlers run as
asyncio tasks on the Worker's loop (``invoke`` moves sync handlers to threads itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections import deque
from typing import TYPE_CHECKING, Any

from msgspec import Raw
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from dex._protocol import (
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
    StateValues,
    StreamWrite,
    Task,
    TaskFrame,
    TaskResult,
    encoder,
    server_frame_decoder,
)
from dex.errors import LimitExceededError, error_from_code

if TYPE_CHECKING:
    from dex._worker._async_worker import AsyncWorker

log = logging.getLogger("dex.worker")

# A handler still running this long after its deadline is cancelled by the Worker; the
# server has already timed the attempt out by then.
_DEADLINE_GRACE_S = 1.0
# The largest frame a server that does not announce its limit accepts (its default).
_DEFAULT_MAX_FRAME_BYTES = 16 * 1024 * 1024


class SessionLostError(ConnectionError):
    """The connection to the server closed while a task waited on it."""


class _TaskIO:
    """The ``dex._invoke.TaskIO`` of one task on this session."""

    __slots__ = ("_seq", "_session", "cancelled", "task_id")

    def __init__(self, session: Session, task_id: str) -> None:
        self._session = session
        self.task_id = task_id
        self._seq = 0
        self.cancelled = False

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
            self._session.send_encoded(data)
            return
        ack = self._session.expect_ack(self.task_id, self._seq)
        self._session.send_encoded(data)
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
        self._session.send_encoded(self._session.encode_within_limit(frame, "Stream write"))

    def is_cancelled(self) -> bool:
        return self.cancelled


class Session:
    def __init__(self, worker: AsyncWorker, ws: ClientConnection) -> None:
        self._worker = worker
        self._ws = ws
        self._out: deque[bytes] = deque()
        self._out_ready = asyncio.Event()
        self._flushed = asyncio.Event()
        self._flushed.set()
        self._acks: dict[tuple[str, int], asyncio.Future[None]] = {}
        self._reads: dict[int, asyncio.Future[StateValues]] = {}
        self._read_ids = 0
        self._tasks: dict[str, tuple[asyncio.Task[None], _TaskIO]] = {}
        self._steps_running = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._closed = False
        self._max_frame = _DEFAULT_MAX_FRAME_BYTES

    # ------------------------------------------------------------------ registration

    async def register(self, timeout: float) -> Registered:
        """Send ``Register`` and wait for the answer.

        Raises:
            RegistrationRejectedError: the server refused this Worker.

        """
        await self._ws.send(encoder.encode(self._worker.register_frame()), text=True)
        async with asyncio.timeout(timeout):
            while True:
                frame = server_frame_decoder.decode(await self._ws.recv())
                if isinstance(frame, Registered):
                    if frame.max_frame_bytes > 0:
                        self._max_frame = frame.max_frame_bytes
                    return frame
                if isinstance(frame, RegisterRejected):
                    raise RegistrationRejectedError(frame.code, frame.message)
                log.warning("ignoring %s frame before registration", type(frame).__name__)

    # ------------------------------------------------------------------ main loop

    async def serve(self) -> None:
        """Run until the connection closes; then cancel every task still running."""
        writer = asyncio.create_task(self._write_loop(), name="dex-worker-writer")
        try:
            async for message in self._ws:
                self._on_frame(message)
        except ConnectionClosed:
            pass
        finally:
            self._closed = True
            self._abandon_all()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    def _on_frame(self, message: str | bytes) -> None:
        frame = server_frame_decoder.decode(message)
        if isinstance(frame, TaskFrame):
            self._on_task(frame.task)
        elif isinstance(frame, HeartbeatAck):
            ack = self._acks.pop((frame.task_id, frame.seq), None)
            if ack is not None and not ack.done():
                if frame.error_code is None:
                    ack.set_result(None)
                else:  # the start was not recorded: the handler sees why
                    ack.set_exception(
                        error_from_code(frame.error_code, frame.error or "start not recorded")
                    )
        elif isinstance(frame, StateValues):
            read = self._reads.pop(frame.request_id, None)
            if read is not None and not read.done():
                read.set_result(frame)
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
        if reason is not None:
            worker.stats.tasks_rejected += 1
            self.send(Reject(task_id=task.task_id, reason=reason))
            return
        io = _TaskIO(self, task.task_id)
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
                async with asyncio.timeout(max(remaining, 0.0)):
                    result = await worker.invoke(task, io)
            else:
                result = await worker.invoke(task, io)
        except asyncio.CancelledError:
            if not io.cancelled:
                raise
        except TimeoutError:
            result = _error_result(task, "TaskDeadlineExceeded", "the task's deadline passed")
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
        worker.stats.tasks_completed += 1
        self.send_encoded(self._result_frame(result))

    def _result_frame(self, result: TaskResult) -> bytes:
        """The encoded result, or a ``LIMIT_EXCEEDED`` error result when it is too large.

        A frame over the server's limit would close the connection and the task would come
        back; the error fails the attempt instead (not retried: the result would not fit).
        """
        data = encoder.encode(ResultFrame(result=result))
        if len(data) <= self._max_frame:
            return data
        message = (
            f"the task's result is {len(data)} bytes, over the limit"
            f" max_worker_frame_bytes={self._max_frame}"
        )
        log.error("task %s: %s", result.task_id, message)
        error = ErrorInfo(error_type=ErrorCode.LIMIT_EXCEEDED, message=message, non_retryable=True)
        return encoder.encode(ResultFrame(result=TaskResult(task_id=result.task_id, error=error)))

    def _cancel(self, task_id: str) -> None:
        entry = self._tasks.get(task_id)
        if entry is None:
            return
        handle, io = entry
        io.cancelled = True
        handle.cancel()

    def _abandon_all(self) -> None:
        for ack in self._acks.values():
            if not ack.done():
                ack.set_exception(SessionLostError("connection to the Dex server lost"))
                ack.exception()
        self._acks.clear()
        for read in self._reads.values():
            if not read.done():
                read.set_exception(SessionLostError("connection to the Dex server lost"))
                read.exception()
        self._reads.clear()
        for task_id in list(self._tasks):
            self._cancel(task_id)

    # ------------------------------------------------------------------ sending

    def send(self, frame: Any) -> None:
        """Queue a frame; it is sent after every frame queued before it. Never blocks."""
        self.send_encoded(encoder.encode(frame))

    def send_encoded(self, data: bytes) -> None:
        if self._closed:
            return
        self._out.append(data)
        self._flushed.clear()
        self._out_ready.set()

    def encode_within_limit(self, frame: Any, what: str) -> bytes:
        """Encode ``frame`` for a handler's call.

        Raises:
            LimitExceededError: the frame is larger than the server accepts.

        """
        data = encoder.encode(frame)
        if len(data) > self._max_frame:
            raise LimitExceededError(
                f"the {what} frame is {len(data)} bytes, over the limit"
                f" max_worker_frame_bytes={self._max_frame}",
                code=ErrorCode.LIMIT_EXCEEDED,
            )
        return data

    def expect_ack(self, task_id: str, seq: int) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._closed:
            fut.set_exception(SessionLostError("connection to the Dex server lost"))
        else:
            self._acks[(task_id, seq)] = fut
        return fut

    async def read_state(self, request: ReadState) -> StateValues:
        """Send ``request`` (with a fresh request ID) and return the server's answer.

        Blob references in the answer are resolved into ``values``.

        Raises:
            SessionLostError: the connection closed before the answer.
            DexServiceError: the server refused the read.

        """
        if self._closed:
            raise SessionLostError("connection to the Dex server lost")
        self._read_ids += 1
        request.request_id = self._read_ids
        fut: asyncio.Future[StateValues] = asyncio.get_running_loop().create_future()
        self._reads[request.request_id] = fut
        try:
            self.send(request)
            answer = await fut
        finally:
            self._reads.pop(request.request_id, None)
        if answer.error_code is not None:
            raise error_from_code(answer.error_code, answer.error or "state read refused")
        if answer.blob_refs:
            refs = list(answer.blob_refs.items())
            blobs = await asyncio.gather(*(self._worker.blobs.get(h) for _, h in refs))
            for (name, _), data in zip(refs, blobs, strict=True):
                answer.values[name] = Raw(data)
            answer.blob_refs = {}
        return answer

    async def _write_loop(self) -> None:
        out = self._out
        while True:
            await self._out_ready.wait()
            self._out_ready.clear()
            while out:
                data = out.popleft()
                try:
                    await self._ws.send(data, text=True)
                except ConnectionClosed:
                    self._flushed.set()
                    return
            self._flushed.set()

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
        await self._ws.close()

    @property
    def running(self) -> int:
        return len(self._tasks)


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
