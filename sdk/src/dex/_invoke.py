"""Run one ``Task`` against a ``Registry``: the seam between the Worker and user code.

``invoke`` decodes the input, builds the Context, runs the handler (async handlers on the
loop; sync functions and sync generators in a worker thread, their frames forwarded to the
loop), converts the result to its wire form and returns one ``TaskResult``. User errors
never escape: they become ``TaskResult.error``. ``asyncio.CancelledError`` propagates.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import logging
import traceback
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, NoReturn, Protocol

from msgspec import Raw

from dex._context import AsyncContext, Context, _Invocation
from dex._protocol import (
    TIMEOUT_HANDLER_STEP,
    CommittedStreamWrite,
    ConditionSpec,
    DecisionSpec,
    ErrorInfo,
    Movement,
    StateValues,
    Task,
    TaskResult,
)
from dex._registry import FlowEntry, Registry, StepEntry
from dex._rpc import RPCResult
from dex._spec import decision_spec, movement_wire, step_types, wait_spec
from dex._step import HeartbeatOutput, StepOutput, StreamOutput, handler_kind
from dex._subflow_wire import subflow_condition_spec
from dex.errors import (
    DexError,
    FeatureNotAvailableError,
    InvalidStepResultError,
    RetryAfterError,
    ValueMappingError,
)

__all__ = ["StateReader", "TaskIO", "error_info", "invoke"]

_MAX_STACK = 8192
_NULL = b"null"
# An inline wait_for that has not returned by then is dispatched as usual instead.
_INLINE_WAIT_FOR_S = 1.0

log = logging.getLogger("dex.worker")


class TaskIO(Protocol):
    """What a running handler needs from its Worker (one object per task)."""

    async def heartbeat(self, value: bytes | None, *, has_value: bool, durable: bool) -> None:
        """Send a heartbeat frame; with ``durable=True`` return after the server's ack."""
        ...

    def stream_write(self, stream: str, value: bytes) -> None:
        """Queue a Stream write frame. Never blocks; best effort."""
        ...

    def is_cancelled(self) -> bool:
        """Whether the server cancelled this task."""
        ...


class StateReader(Protocol):
    """Optional extra of a ``TaskIO``: on-demand reads of committed map instances.

    A Worker's TaskIO implements it; an IO without ``read_state`` makes
    ``AttributeMap.load_range`` / ``load_keys`` fail with ``DexError``.
    """

    async def read_state(
        self,
        map_name: str,
        *,
        names: list[str] | None,
        start: str | None,
        end: str | None,
        limit: int | None,
    ) -> StateValues:
        """Ask the server; blob references in the answer are already resolved to values.

        Raises:
            DexServiceError: the server refused the read (unknown task, undeclared map).

        """
        ...


def error_info(exc: BaseException) -> ErrorInfo:
    """Return the wire form of a handler failure (a ``RetryAfterError`` reports its cause)."""
    retry_after = getattr(exc, "retry_after_s", None)
    if isinstance(exc, RetryAfterError):
        exc = exc.cause
    stack = "".join(traceback.format_exception(exc))
    if len(stack) > _MAX_STACK:
        stack = "...\n" + stack[-_MAX_STACK:]
    return ErrorInfo(
        error_type=type(exc).__name__,
        message=str(exc) or type(exc).__name__,
        stack=stack,
        retry_after_s=float(retry_after) if isinstance(retry_after, int | float) else None,
        non_retryable=isinstance(exc, InvalidStepResultError | FeatureNotAvailableError)
        or bool(getattr(exc, "non_retryable", False)),
    )


async def invoke(
    registry: Registry, task: Task, io: TaskIO, *, executor: Executor | None = None
) -> TaskResult:
    """Run one task's handler and return its one result (never raises for user errors).

    Sync handlers run on ``executor`` (None: the loop's default executor).

    Raises:
        asyncio.CancelledError: the Worker cancelled the task (the result is not needed).

    """
    try:
        return await _invoke(registry, task, io, executor)
    except asyncio.CancelledError:
        raise
    except _Deterministic as exc:
        error = error_info(exc.cause)
        error.non_retryable = True
        return TaskResult(task_id=task.task_id, error=error)
    except Exception as exc:
        return TaskResult(task_id=task.task_id, error=error_info(exc))


class _Deterministic(Exception):
    """A value that does not map to its type, outside the handler: every retry repeats it.

    The task's input does not match the Step's input type (a raw start without input, a
    movement from another code version), or the handler's result holds a value that does
    not match its target's type. The attempt fails at once instead of retrying for hours.
    """

    def __init__(self, cause: ValueMappingError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class _DeterministicErrors:
    """``with _deterministic:`` turns a ``ValueMappingError`` into ``_Deterministic``.

    A class rather than ``contextlib.contextmanager``: it runs around every task's input
    and result, and a generator-based manager costs several times as much. Stateless, so
    the one instance serves every task and thread.
    """

    def __enter__(self) -> None:
        return None

    def __exit__(self, tp: object, exc: BaseException | None, tb: object) -> None:
        if isinstance(exc, ValueMappingError):
            raise _Deterministic(exc) from exc


_deterministic = _DeterministicErrors()


def _input(data: Raw | None) -> bytes:
    return _NULL if data is None else bytes(data)


async def _invoke(
    registry: Registry, task: Task, io: TaskIO, executor: Executor | None
) -> TaskResult:
    try:
        entry = registry.flow_entry(task.flow_type)
    except KeyError:
        raise DexError(f"Flow type {task.flow_type!r} is not registered here") from None
    if task.kind == "rpc":
        return await _invoke_rpc(entry, task, io, executor)
    if task.step_type == TIMEOUT_HANDLER_STEP and task.kind == "execute":
        return await _invoke_timeout_handler(entry, task, io, executor)
    se = entry.steps.get(task.step_type or "")
    if se is None:
        raise DexError(f"Step type {task.step_type!r} is not in Flow {task.flow_type!r}")
    with _deterministic:
        value = se.input_codec.decode(_input(task.input))
    inv = _Invocation(
        task,
        task.kind,
        declared=entry.declared,
        codec=entry.codec,
        io=io,
        loop=asyncio.get_running_loop(),
    )
    if task.kind == "wait_for":
        if se.wait_for_kind is None:
            raise DexError(f"Step {se.step_type} has no wait_for")
        result = await _run(se.step.wait_for, se.wait_for_kind, inv, (value,), executor)
        with _deterministic:
            wait = wait_spec(
                result,
                entry,
                se.step_type,
                lambda c: subflow_condition_spec(c, registry, entry.flow_type, se.step_type),
            )
        return _result(inv, wait=wait)
    result = await _run(se.step.execute, se.execute_kind, inv, (value,), executor)
    with _deterministic:
        decision = decision_spec(result, entry, se.step_type)
    if decision.kind == "go_to":
        inline = _inline_targets(entry, decision)
        if inline:
            await _inline_waits(entry, inline, executor)
    return _result(inv, decision=decision)


class NotInline(BaseException):
    """A method run inline (``wait_for``, or ``execute`` in ``_worker._inline``) overreached.

    It used what only a dispatched task has (its context, a heartbeat, a Stream write).

    A BaseException, so that an ``except Exception`` in user code does not swallow it.
    """


class _InlineContext:
    """The ``context`` of an inline ``wait_for``: any use of it sends the Step the usual way."""

    __slots__ = ()

    def __getattr__(self, name: str) -> NoReturn:
        raise NotInline(name)


_INLINE_CONTEXT: Any = _InlineContext()


def _no_subflow(condition: object) -> ConditionSpec:
    raise NotInline("SubFlow condition")


def _inline_targets(entry: FlowEntry, decision: DecisionSpec) -> list[tuple[Movement, StepEntry]]:
    """The movements whose target's ``wait_for`` is marked ``wait_for_inline``, with it."""
    out = []
    for m in decision.movements:
        target = entry.steps.get(m.step_type)
        if target is None or target.wait_for_kind not in ("async", "sync"):
            continue
        options = m.options if m.options is not None else target.spec.options
        if options.wait_for_inline:
            out.append((m, target))
    return out


async def _inline_waits(
    entry: FlowEntry, inline: list[tuple[Movement, StepEntry]], executor: Executor | None
) -> None:
    """Run each ``wait_for`` of ``inline`` here and attach its Wait to the movement.

    A movement whose ``wait_for`` cannot run here keeps no Wait: the server dispatches
    that ``wait_for`` as usual.
    """
    for m, target in inline:
        fn: Any = target.step.wait_for
        try:
            value = target.input_codec.decode(_input(m.input))
            async with asyncio.timeout(_INLINE_WAIT_FOR_S):
                if target.wait_for_kind == "async":
                    wait = await fn(_INLINE_CONTEXT, value)
                else:
                    wait = await _in_thread(executor, fn, _INLINE_CONTEXT, value)
            m.wait = wait_spec(wait, entry, target.step_type, _no_subflow)
        except (NotInline, Exception) as exc:
            log.debug("%s wait_for not run inline (%r): dispatched as usual", m.step_type, exc)


async def _invoke_timeout_handler(
    entry: FlowEntry, task: Task, io: TaskIO, executor: Executor | None
) -> TaskResult:
    """Run ``Flow.handle_timeout`` as an Execute-like invocation; it returns a decision."""
    inv = _Invocation(
        task,
        "execute",
        declared=entry.declared,
        codec=entry.codec,
        io=io,
        loop=asyncio.get_running_loop(),
    )
    fn = entry.flow.handle_timeout
    result = await _run(fn, handler_kind(type(entry.flow).handle_timeout), inv, (), executor)
    with _deterministic:
        decision = decision_spec(result, entry, TIMEOUT_HANDLER_STEP)
    return _result(inv, decision=decision)


async def _invoke_rpc(
    entry: FlowEntry, task: Task, io: TaskIO, executor: Executor | None
) -> TaskResult:
    re = entry.rpcs.get(task.rpc_name or "")
    if re is None:
        raise DexError(f"RPC {task.rpc_name!r} is not defined on Flow {task.flow_type!r}")
    args: tuple[Any, ...] = ()
    if re.input_codec is not None:
        args = (re.input_codec.decode(_input(task.input)),)
    inv = _Invocation(
        task,
        "rpc",
        declared=entry.declared,
        codec=entry.codec,
        io=io,
        loop=asyncio.get_running_loop(),
    )
    result = await _run(re.method, re.kind, inv, args, executor)
    movements = []
    cancels: list[str] = []
    output = result
    if isinstance(result, RPCResult):
        output = result.output
        movements = [movement_wire(m, entry, None, "rpc") for m in result.next_steps]
        cancels = step_types(
            tuple(result.canceling_steps), entry, "RPCResult.canceling_steps", None, "rpc"
        )
    rpc_output = None if output is None else Raw(re.output_codec.encode(output))
    res = _result(inv)
    res.rpc_output = rpc_output
    res.rpc_movements = movements
    res.rpc_cancel_steps = cancels
    return res


def _result(inv: _Invocation, **kw: Any) -> TaskResult:
    for buf in inv.buffers:  # flush before the result so no write trails it
        buf.flush()
        # a sync generator may drop a frame that write() returned: send it anyway
        for frame in buf.emitted:
            if id(frame) not in inv.yielded and inv.io is not None:
                inv.io.stream_write(frame.stream, frame.value)
    return TaskResult(
        task_id=inv.task.task_id,
        attribute_writes={k: None if v is None else Raw(v) for k, v in inv.writes.items()},
        publishes=inv.publishes,
        channel_deletes=inv.deletes,
        locals={k: Raw(v) for k, v in inv.locals.items()},
        events=inv.events,
        stream_writes=[
            CommittedStreamWrite(stream=name, value=Raw(data)) for name, data in inv.after_commit
        ],
        **kw,
    )


async def _run(
    fn: Callable[..., Any],
    kind: str,
    inv: _Invocation,
    args: tuple[Any, ...],
    executor: Executor | None,
) -> Any:
    if kind == "async":
        inv.stream_mode = "direct"
        return await fn(AsyncContext(inv), *args)
    ctx = Context(inv)
    try:
        if kind == "generator":
            inv.stream_mode = "frame"
            return await _in_thread(executor, _drive, fn, ctx, args, inv)
        inv.stream_mode = "threadsafe"
        return await _in_thread(executor, fn, ctx, *args)
    except asyncio.CancelledError:
        inv.cancelled = True  # the thread sees it through is_cancellation_requested()
        raise


async def _in_thread(executor: Executor | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``asyncio.to_thread`` on ``executor``: the thread sees this task's context variables."""
    call = functools.partial(contextvars.copy_context().run, fn, *args)
    return await asyncio.get_running_loop().run_in_executor(executor, call)


def _drive(fn: Callable[..., Any], ctx: Context, args: tuple[Any, ...], inv: _Invocation) -> Any:
    """Iterate a sync generator handler in a worker thread, forwarding its frames."""
    gen = fn(ctx, *args)
    loop = inv.loop
    assert loop is not None
    io = inv.io
    try:
        frame = next(gen)
        while True:
            if inv.cancelled:
                gen.close()
                return None
            if not isinstance(frame, StepOutput):
                raise InvalidStepResultError(
                    inv.task.flow_type,
                    inv.task.step_type,
                    inv.task.kind,
                    f"a generator handler may only yield heartbeat(...) or stream.write(...) "
                    f"frames, got {frame!r:.100}",
                )
            if isinstance(frame, StreamOutput):
                inv.yielded[id(frame)] = frame
            if io is not None:
                _forward(loop, io, frame, inv)
            frame = gen.send(None)
    except StopIteration as stop:
        return stop.value


def _forward(
    loop: asyncio.AbstractEventLoop, io: TaskIO, frame: StepOutput, inv: _Invocation
) -> None:
    if isinstance(frame, StreamOutput):
        if not frame.sent:
            loop.call_soon_threadsafe(io.stream_write, frame.stream, frame.value)
        return
    assert isinstance(frame, HeartbeatOutput)
    fut = asyncio.run_coroutine_threadsafe(
        io.heartbeat(frame.value, has_value=frame.has_value, durable=frame.durable), loop
    )
    while True:  # wait for the frame (and the ack when durable), but notice cancellation
        try:
            fut.result(timeout=0.2)
            return
        except TimeoutError:
            if inv.cancelled or loop.is_closed():
                fut.cancel()
                return
