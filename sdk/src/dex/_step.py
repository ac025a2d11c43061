"""Step: one unit of a Flow, with an optional ``wait_for`` and a required ``execute``."""

from __future__ import annotations

import inspect
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dex._codec import ANY_CODEC

if TYPE_CHECKING:
    from collections.abc import Awaitable, Generator

    from dex._decisions import StepDecision
    from dex._options import StepOptions
    from dex._waits import Wait

T = TypeVar("T")


class _Unset:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


class StepOutput:
    """A progress frame a sync generator handler yields: ``heartbeat(...)`` or ``stream.write``.

    Frames are forwarded to the server in order, while the handler keeps running.

    Raises:
        TypeError: on ``StepOutput(...)`` itself: build frames with those functions.

    """

    __slots__ = ()

    def __new__(cls, *args: object, **kwargs: object) -> StepOutput:
        if cls is StepOutput:
            raise TypeError("StepOutput frames are built by heartbeat(...) or stream.write(...)")
        return super().__new__(cls)


@dataclass(frozen=True, slots=True)
class HeartbeatOutput(StepOutput):
    """A heartbeat frame; ``value`` is the encoded checkpoint when ``has_value``."""

    value: bytes | None
    has_value: bool
    durable: bool = False


@dataclass(frozen=True, slots=True)
class StreamOutput(StepOutput):
    """A Stream write frame (encoded value). ``sent`` is True when already delivered."""

    stream: str
    value: bytes
    sent: bool = False


def heartbeat(value: object = UNSET, *, durable: bool = False) -> HeartbeatOutput:
    """Build a heartbeat frame for a sync generator handler to ``yield``.

    ``heartbeat()`` only reports liveness; ``heartbeat(value)`` also stores ``value`` as the
    checkpoint the next attempt reads with ``context.get_last_heartbeat_value(T)``.
    With ``durable=True`` the ``yield`` resumes only after the server committed that this
    attempt started (so it is never redelivered to another Worker).

    Raises:
        ValueMappingError: ``value`` cannot be encoded as JSON.

    """
    if value is UNSET:
        return HeartbeatOutput(None, False, durable)
    return HeartbeatOutput(ANY_CODEC.encode(value), True, durable)


class Step(Generic[T]):
    """Base class of a Step whose input type is ``T`` (``class Charge(Step[Order])``).

    Override ``execute(self, context, input) -> StepDecision`` (required) and optionally
    ``wait_for(self, context, input) -> Wait``. Handlers may be plain functions, sync
    generators that ``yield`` ``heartbeat(...)`` / ``stream.write(...)`` frames and
    ``return`` their result, or ``async def`` (needs ``Registry(...,
    allow_async_handlers=True)``; async handlers get an ``AsyncContext``). Async generators
    are rejected. The same decoded input is passed to both methods and to every retry.

    A Step instance is stateless between calls: every attempt may run in another process.
    """

    def get_step_type(self) -> str:
        """Return the Step type name, unique within its Flow. Defaults to the class name."""
        return type(self).__name__

    def get_step_options(self) -> StepOptions | None:
        """Options of this Step type (timeouts, retries, locks, loads). Default: None."""
        return None

    def wait_for(
        self, context: Any, input: T, /
    ) -> Wait | Awaitable[Wait] | Generator[StepOutput, None, Wait]:
        """Return optional first phase: return the ``Wait`` whose conditions must hold first."""
        raise NotImplementedError  # never called: overriding it is what enables wait_for

    def execute(
        self, context: Any, input: T, /
    ) -> StepDecision | Awaitable[StepDecision] | Generator[StepOutput, None, StepDecision]:
        """Second phase: do the work and return the ``StepDecision`` (what happens next)."""
        raise NotImplementedError(f"{type(self).__name__} does not override execute")


def has_wait_for(step: Step[Any]) -> bool:
    """Whether the Step class overrides ``wait_for``."""
    return type(step).wait_for is not Step.wait_for


def step_input_type(step: Step[Any]) -> object:
    """Return the input type of a Step: ``T`` of ``Step[T]``, else its annotation."""
    for cls in type(step).__mro__:
        for base in getattr(cls, "__orig_bases__", ()):
            origin = typing.get_origin(base)
            if isinstance(origin, type) and issubclass(origin, Step):
                args = typing.get_args(base)
                if args and not isinstance(args[0], TypeVar):
                    return args[0]
    hints: dict[str, Any]
    try:
        hints = typing.get_type_hints(type(step).execute)
    except Exception:
        hints = {}
    params = list(inspect.signature(type(step).execute).parameters)
    if len(params) >= 3 and params[2] in hints:
        return hints[params[2]]
    return Any


def handler_kind(fn: object) -> str:
    """``"async"``, ``"generator"``, ``"async_generator"`` or ``"sync"``."""
    if inspect.isasyncgenfunction(fn):
        return "async_generator"
    if inspect.iscoroutinefunction(fn):
        return "async"
    if inspect.isgeneratorfunction(fn):
        return "generator"
    return "sync"
