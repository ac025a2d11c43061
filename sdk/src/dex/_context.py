"""Context and AsyncContext: what a handler knows about its invocation, and its staging area.

Every state effect (Attribute writes, Channel publishes and deletes, execution locals,
recorded events) is staged on the invocation and sent with the handler's one result, so a
failed attempt commits nothing. Reads see the task's snapshot plus the staged writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from msgspec import Raw

from dex._codec import ANY_CODEC
from dex._codec import WireCodec as Codec
from dex._protocol import ChannelDelete, Publish, RecordedEvent, Task
from dex._step import UNSET, HeartbeatOutput
from dex.errors import DexError

if TYPE_CHECKING:
    from dex._invoke import TaskIO
    from dex._state.stream import BufferedText

T = TypeVar("T")

HandlerKind = Literal["wait_for", "execute", "rpc"]


@dataclass(frozen=True, slots=True)
class RecoveryErrorInfo:
    """The failure that sent this execution down a recovery path.

    Attributes:
        detail: the error message (and stack, when one was recorded).
        error_type: the exception class name, or the engine's failure type (e.g. a timeout).

    """

    detail: str
    error_type: str


class _Invocation:
    """Per-invocation state shared by the Context and the state handles."""

    __slots__ = (
        "after_commit",
        "buffers",
        "cancelled",
        "codec",
        "declared",
        "deletes",
        "event_names",
        "events",
        "fetched",
        "io",
        "kind",
        "locals",
        "loop",
        "publishes",
        "stream_mode",
        "task",
        "writes",
        "yielded",
    )

    def __init__(
        self,
        task: Task,
        kind: HandlerKind,
        *,
        declared: dict[str, str],
        codec: Callable[[object], Codec],
        io: TaskIO | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.task = task
        self.kind = kind
        self.declared = declared
        self.codec = codec
        self.io = io
        self.loop = loop
        self.cancelled = False
        # how Stream writes leave: "direct" (async handler, on the loop), "threadsafe"
        # (plain sync handler in a thread), "frame" (sync generator yields them)
        self.stream_mode: Literal["direct", "threadsafe", "frame"] = "frame"
        self.writes: dict[str, bytes | None] = {}
        self.publishes: list[Publish] = []
        self.deletes: list[ChannelDelete] = []
        self.locals: dict[str, bytes] = {}
        self.events: list[RecordedEvent] = []
        self.event_names: set[str] = set()
        self.buffers: list[BufferedText] = []
        self.after_commit: list[tuple[str, bytes]] = []  # Stream writes held for the commit
        self.yielded: dict[int, object] = {}  # frames a generator yielded, by id (kept alive)
        # map instances read on demand (load_range / load_keys); None: read as unset
        self.fetched: dict[str, bytes | None] = {}

    def read(self, physical: str) -> bytes | None:
        """Staged value, else snapshot value, else None (unset or deleted)."""
        if physical in self.writes:
            return self.writes[physical]
        if physical in self.fetched:
            return self.fetched[physical]
        raw = self.task.attributes.get(physical)
        return None if raw is None else bytes(raw)

    def is_cancelled(self) -> bool:
        return self.cancelled or (self.io is not None and self.io.is_cancelled())


class Context:
    """What a sync handler (Step method or RPC) knows about its invocation.

    Attributes:
        flow_id: the Flow's business ID.
        run_id: the current run of that Flow.
        flow_type: the Flow type name.
        step_type: the Step type (None in an RPC).
        step_execution_id: ``"<StepType>-<n>"``, shared by every attempt (None in an RPC).
        from_step_execution_id: what scheduled this execution: ``"__start__"``,
            ``"__rpc/<name>"`` or another Step execution ID (None in an RPC).
        rpc_name: the RPC's name in an RPC, else None.
        attempt: 1-based attempt of this method (wait_for and execute count separately).
        first_attempt_at: when the first attempt of this method started (UTC).
        recovery_error: the failure that routed here (failure routes), else None.

    A Context is only valid during its invocation; do not keep it. Its methods may be called
    from the handler's thread only.

    """

    __slots__ = (
        "_inv",
        "attempt",
        "first_attempt_at",
        "flow_id",
        "flow_type",
        "from_step_execution_id",
        "recovery_error",
        "rpc_name",
        "run_id",
        "step_execution_id",
        "step_type",
    )

    def __init__(self, inv: _Invocation) -> None:
        task = inv.task
        self._inv = inv
        self.flow_id: str = task.flow_id
        self.run_id: str = task.run_id
        self.flow_type: str = task.flow_type
        self.step_type: str | None = task.step_type
        self.step_execution_id: str | None = task.step_execution_id
        self.from_step_execution_id: str | None = task.from_step_execution_id
        self.rpc_name: str | None = task.rpc_name
        self.attempt: int = task.attempt
        self.first_attempt_at: datetime = datetime.fromtimestamp(task.first_attempt_at, UTC)
        rec = task.recovery_error
        self.recovery_error: RecoveryErrorInfo | None = (
            None if rec is None else RecoveryErrorInfo(rec.detail, rec.error_type)
        )

    def has_timer_fired(self, index: int | None = None) -> bool:
        """Whether any Timer (``index=None``) or the ``index``-th Timer completed the Wait.

        ``index`` counts the Timer conditions of the Wait in declaration order (0-based).
        Always False outside ``execute`` or when the Wait had no Timer.
        """
        results = self._inv.task.condition_results
        if results is None:
            return False
        fired = results.timers_fired
        if index is None:
            return any(fired)
        return 0 <= index < len(fired) and fired[index]

    def wait_for_method_failed(self) -> bool:
        """Return True when ``wait_for`` failed for good and PROCEED ran execute."""
        return self._inv.task.wait_for_failed

    def is_cancellation_requested(self) -> bool:
        """Return True once this invocation was cancelled (sync handlers should poll it)."""
        return self._inv.is_cancelled()

    def has_last_heartbeat_value(self) -> bool:
        """Whether a previous attempt stored a heartbeat checkpoint."""
        return self._inv.task.last_heartbeat_value is not None

    def get_last_heartbeat_value(self, value_type: type[T]) -> T | None:
        """Return the previous attempt's heartbeat checkpoint decoded as ``value_type``, or None.

        Raises:
            ValueMappingError: the checkpoint does not match ``value_type``.

        """
        raw = self._inv.task.last_heartbeat_value
        if raw is None:
            return None
        value: T = self._inv.codec(value_type).decode(bytes(raw))
        return value

    def set_step_execution_local(self, key: str, value: object) -> None:
        """Store a small scratch value that ``execute`` of this execution can read back.

        Sent with this method's result; a failed attempt stores nothing.
        """
        self._inv.locals[key] = ANY_CODEC.encode(value)

    def get_step_execution_local(self, key: str, value_type: type[T]) -> T | None:
        """Return a value set by ``set_step_execution_local`` (here or earlier), or None."""
        data = self._inv.locals.get(key)
        if data is None:
            raw = self._inv.task.locals.get(key)
            if raw is None:
                return None
            data = bytes(raw)
        value: T = self._inv.codec(value_type).decode(data)
        return value

    def record_event(self, name: str, value: object = None) -> None:
        """Record a named diagnostic value in this method's history event.

        Raises:
            DexError: ``name`` was already recorded in this invocation.

        """
        inv = self._inv
        if name in inv.event_names:
            raise DexError(f"event {name!r} was already recorded in this invocation")
        inv.event_names.add(name)
        raw = None if value is None else Raw(ANY_CODEC.encode(value))
        inv.events.append(RecordedEvent(name=name, value=raw))


class AsyncContext(Context):
    """The Context of an ``async def`` handler: adds ``await context.heartbeat(...)``.

    Stream writes (``stream.write(context, v)``) are sent at once, without ``await``.
    """

    __slots__ = ()

    async def heartbeat(self, value: Any = UNSET, *, durable: bool = False) -> None:
        """Report liveness, optionally storing ``value`` as the checkpoint for later attempts.

        By default this returns once the frame (and every frame the Worker queued before
        it) is written to the server's connection, or at once while the Worker is
        disconnected (the frame then waits for the next connection). A written frame
        counts: should the Worker die from here on, even before its event loop runs
        again, the server retries the Step as the attempt's successor instead of handing
        the same attempt out again, so the retry policy bounds a crash that repeats. With
        ``durable=True`` it returns only after the server committed that this attempt has
        started: from then on the attempt is never redelivered to another Worker (use it
        before an effect that must run at most once).

        Raises:
            DexError: called in an RPC handler.
            ValueMappingError: ``value`` cannot be encoded as JSON.

        """
        inv = self._inv
        if inv.kind == "rpc" or inv.io is None:
            raise DexError("heartbeat is only available in Step handlers, not in RPCs")
        frame = HeartbeatOutput(
            None if value is UNSET else ANY_CODEC.encode(value), value is not UNSET, durable
        )
        await inv.io.heartbeat(frame.value, has_value=frame.has_value, durable=durable)
