"""A minimal Worker speaking the wire protocol directly (no SDK)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import msgspec
import websockets
from dex._protocol import (
    FlowSpec,
    Register,
    Registered,
    ResultFrame,
    ServerBatch,
    ServerFrame,
    Task,
    TaskFrame,
    TaskResult,
    WorkerFrame,
    encoder,
    server_frame_decoder,
)

Handler = Callable[["RawWorker", Task], Awaitable[TaskResult | None]]


class RawWorker:
    def __init__(
        self,
        address: str,
        flows: list[FlowSpec],
        handler: Handler,
        *,
        slots: int = 4,
        reserved: int = 1,
        token: str | None = None,
        instance_id: str = "",
        resume: list[str] | None = None,
        batches: bool = False,
    ) -> None:
        self.address = address
        self.instance_id = instance_id
        self.resume = resume or []
        self.welcome: Registered | None = None
        self.flows = flows
        self.handler = handler
        self.slots = slots
        self.reserved = reserved
        self.token = token
        self.tasks: list[Task] = []
        self.frames: list[ServerFrame] = []
        self.ws: websockets.ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None
        self.registered = asyncio.Event()
        self.batches = batches  # announce that it reads ServerBatch frames
        self.batches_received = 0

    async def __aenter__(self) -> RawWorker:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.ws = await websockets.connect(
            f"ws://{self.address}/v1/worker", additional_headers=headers
        )
        await self.send(
            Register(
                app_worker_id="raw",
                flows=self.flows,
                max_concurrent_tasks=self.slots,
                reserved_rpc_tasks=self.reserved,
                worker_instance_id=self.instance_id,
                resume_task_ids=self.resume,
                accepts_batches=self.batches,
            )
        )
        first = server_frame_decoder.decode(await self.ws.recv())
        assert isinstance(first, Registered), first
        self.welcome = first
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()

    async def send(self, frame: WorkerFrame) -> None:
        assert self.ws is not None
        await self.ws.send(encoder.encode(frame).decode())

    async def send_raw(self, data: bytes) -> None:
        """Send ``data`` as one text frame, whatever it holds."""
        assert self.ws is not None
        await self.ws.send(data.decode())

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            frame = server_frame_decoder.decode(msg)
            frames: list[ServerFrame] = [frame]
            if isinstance(frame, ServerBatch):
                self.batches_received += 1
                frames = list(frame.frames)
            for one in frames:
                self.frames.append(one)
                if isinstance(one, TaskFrame):
                    self.tasks.append(one.task)
                    asyncio.create_task(self._run(one.task))

    async def _run(self, task: Task) -> None:
        result = await self.handler(self, task)
        if result is not None:
            await self.send(ResultFrame(result=result))


def raw(value: object) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(value))


async def silent(w: RawWorker, t: Task) -> TaskResult | None:
    """A handler that answers nothing: the test sends the frames itself."""
    return None


async def first_task(w: RawWorker, timeout: float = 20.0) -> Task:
    """Return the first task ``w`` received, waiting up to ``timeout`` seconds for it."""
    deadline = time.monotonic() + timeout
    while not w.tasks:
        assert time.monotonic() < deadline, "no task arrived"
        await asyncio.sleep(0.02)
    return w.tasks[0]
