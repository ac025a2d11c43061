"""AgentEventWriter: a Step's thread-safe, batching writer to the AgentEvents Stream."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

from dex_agents._enums import AgentEventType, ToolCallStatus
from dex_agents._records import AgentEvent

EventSink = Callable[[AgentEvent], object]

TEXT_FLUSH_INTERVAL_S = 0.05
TEXT_FLUSH_BYTES = 4096
HEARTBEAT_INTERVAL_S = 20.0

_DELTA_TYPES = (AgentEventType.TEXT_DELTA, AgentEventType.REASONING_DELTA)


def new_event(
    kind: AgentEventType,
    data: dict[str, Any],
    turn_id: str,
    step_execution_id: str,
    attempt: int,
) -> AgentEvent:
    """An event of one Step attempt, stamped now."""
    return AgentEvent(
        type=kind,
        turn_id=turn_id,
        step_execution_id=step_execution_id,
        attempt=attempt,
        data=data,
        created_at=time.time(),
    )


class AgentEventWriter:
    """Writes ``AgentEvent``s for one Step attempt, bound to its turn and Step execution.

    Every event carries the bound ``turn_id``, ``step_execution_id`` and ``attempt``.
    Consecutive text (or reasoning) deltas are batched into one Stream message: a batch
    is written when it reaches 4 KiB, 50 ms after its first chunk, before any other
    event, and when the Step's call returns. Streams are best effort, so a UI must
    rebuild from ``get_agent_snapshot``.

    Concurrency: every method is safe to call from any thread. Events reach the sink on
    the event loop the writer was created on, in call order. Writes after the runner
    call returns (after ``close``) are dropped silently.
    """

    def __init__(
        self,
        sink: EventSink,
        *,
        turn_id: str,
        step_execution_id: str,
        attempt: int,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._sink = sink
        self.turn_id = turn_id
        self.step_execution_id = step_execution_id
        self.attempt = attempt
        self._loop = loop or asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._closed = False
        self._pending_type: AgentEventType | None = None
        self._pending_text: list[str] = []
        self._pending_bytes = 0
        self._flush_handle: asyncio.TimerHandle | None = None

    @property
    def closed(self) -> bool:
        """Whether the writer stopped accepting events."""
        return self._closed

    def write_text_delta(self, text: str) -> None:
        """Append model output text (batched into ``text_delta`` events)."""
        self._delta(AgentEventType.TEXT_DELTA, text)

    def write_reasoning_delta(self, text: str) -> None:
        """Append model reasoning text (batched into ``reasoning_delta`` events)."""
        self._delta(AgentEventType.REASONING_DELTA, text)

    def write_tool_call_started(self, tool_call_id: str, tool_name: str) -> None:
        """Write ``tool_call_started`` (for tools a framework runs itself, inside RunModel)."""
        self.write_event(
            AgentEventType.TOOL_CALL_STARTED,
            {"tool_call_id": tool_call_id, "tool_name": tool_name},
        )

    def write_tool_call_finished(
        self, tool_call_id: str, tool_name: str, status: ToolCallStatus | str
    ) -> None:
        """Write ``tool_call_finished`` with the call's final status."""
        self.write_event(
            AgentEventType.TOOL_CALL_FINISHED,
            {"tool_call_id": tool_call_id, "tool_name": tool_name, "status": str(status)},
        )

    def write_event(self, event_type: AgentEventType | str, data: dict[str, Any]) -> None:
        """Write one event.

        A ``str`` that is not an ``AgentEventType`` value is written as a ``custom`` event
        with ``data["name"]`` set to it.
        """
        try:
            kind = AgentEventType(event_type)
        except ValueError:
            kind = AgentEventType.CUSTOM
            data = {"name": str(event_type), **data}
        if kind in _DELTA_TYPES:
            self._delta(kind, str(data.get("text", "")))
            return
        with self._lock:
            if self._closed:
                return
            batch = self._take_batch()
            event = self.event(kind, data)
        if batch is not None:
            self._emit(batch)
        self._emit(event)

    def close(self) -> None:
        """Write any batched text, then drop every later write. Call on the loop thread."""
        with self._lock:
            if self._closed:
                return
            batch = self._take_batch()
            self._closed = True
        if batch is not None:
            self._deliver(batch)

    def _delta(self, kind: AgentEventType, text: str) -> None:
        if not text:
            return
        with self._lock:
            if self._closed:
                return
            batch = self._take_batch() if self._pending_type not in (None, kind) else None
            first = self._pending_type is None
            self._pending_type = kind
            self._pending_text.append(text)
            self._pending_bytes += len(text.encode())
            full = self._take_batch() if self._pending_bytes >= TEXT_FLUSH_BYTES else None
        if batch is not None:
            self._emit(batch)
        if full is not None:
            self._emit(full)
        elif first:
            self._on_loop(self._arm_flush)

    def _take_batch(self) -> AgentEvent | None:
        if self._pending_type is None:
            return None
        event = self.event(self._pending_type, {"text": "".join(self._pending_text)})
        self._pending_type = None
        self._pending_text = []
        self._pending_bytes = 0
        return event

    def event(self, kind: AgentEventType, data: dict[str, Any]) -> AgentEvent:
        """Build (not write) an event bound to this writer's turn, Step and attempt."""
        return new_event(kind, data, self.turn_id, self.step_execution_id, self.attempt)

    def _arm_flush(self) -> None:
        if self._flush_handle is None:
            self._flush_handle = self._loop.call_later(TEXT_FLUSH_INTERVAL_S, self._timed_flush)

    def _timed_flush(self) -> None:
        self._flush_handle = None
        with self._lock:
            batch = None if self._closed else self._take_batch()
        if batch is not None:
            self._deliver(batch)

    def _emit(self, event: AgentEvent) -> None:
        # An event accepted before close is delivered even if its hop to the loop ends later.
        self._on_loop(lambda: self._deliver(event))

    def _deliver(self, event: AgentEvent) -> None:
        try:
            self._sink(event)
        except Exception:
            # The Stream is best effort: a lost event must never fail the Step.
            return

    def _on_loop(self, callback: Callable[[], None]) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            callback()
        else:
            self._loop.call_soon_threadsafe(callback)


async def run_heartbeats(
    heartbeat: Callable[[], Awaitable[None]], interval_s: float = HEARTBEAT_INTERVAL_S
) -> None:
    """Call ``heartbeat`` every ``interval_s`` seconds until cancelled; errors are ignored."""
    while True:
        await asyncio.sleep(interval_s)
        await _beat(heartbeat)


async def _beat(heartbeat: Callable[[], Awaitable[None]]) -> None:
    try:
        await heartbeat()
    except asyncio.CancelledError:
        raise
    except Exception:
        return


def start_heartbeats(
    heartbeat: Callable[[], Awaitable[None]], interval_s: float = HEARTBEAT_INTERVAL_S
) -> Callable[[], None]:
    """Call ``heartbeat`` every ``interval_s`` seconds from now on; return what stops it.

    Like a task running :func:`run_heartbeats`, but the task starts only when the first
    beat is due: most calls end sooner, and then cost one timer instead of a task.
    """
    loop = asyncio.get_running_loop()
    beats: list[asyncio.Task[None]] = []

    async def first_then_every() -> None:
        await _beat(heartbeat)
        await run_heartbeats(heartbeat, interval_s)

    timer = loop.call_later(interval_s, lambda: beats.append(loop.create_task(first_then_every())))

    def stop() -> None:
        timer.cancel()
        for task in beats:
            task.cancel()

    return stop
