"""Helpers for the SDK unit tests: a recording TaskIO and a Task builder."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from dex._codec import codec_for
from dex._protocol import Task


class RecordingIO:
    """A TaskIO that records frames; ``durable`` heartbeats wait for ``ack``."""

    def __init__(self, *, cancelled: bool = False) -> None:
        self.frames: list[tuple[Any, ...]] = []
        self.cancelled = cancelled
        self.ack = asyncio.Event()
        self.ack.set()

    async def heartbeat(self, value: bytes | None, *, has_value: bool, durable: bool) -> None:
        if durable:
            await self.ack.wait()
        self.frames.append(("heartbeat", value, has_value, durable))

    def stream_write(self, stream: str, value: bytes) -> None:
        self.frames.append(("stream", stream, value))

    def is_cancelled(self) -> bool:
        return self.cancelled


def raw(value: object) -> msgspec.Raw:
    return msgspec.Raw(codec_for(Any).encode(value))


def task(
    kind: str = "execute",
    step_type: str | None = None,
    *,
    flow_type: str = "Demo",
    input: object = None,
    rpc_name: str | None = None,
    **fields: Any,
) -> Task:
    return Task(
        task_id="task-1",
        kind=kind,  # type: ignore[arg-type]
        flow_type=flow_type,
        flow_id="flow-1",
        run_id="run-1",
        step_type=step_type,
        step_execution_id=f"{step_type}-1" if step_type else None,
        from_step_execution_id="__start__" if step_type else None,
        rpc_name=rpc_name,
        input=None if input is None else raw(input),
        **fields,
    )


def decode(data: msgspec.Raw | None) -> Any:
    return None if data is None else msgspec.json.decode(bytes(data))
