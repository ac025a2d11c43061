"""Flow: a named set of Steps, state declarations and RPCs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dex._state import Attribute, AttributeMap, Channel, ChannelMap, PersistenceSchema, Stream
from dex._step import Step
from dex.errors import FlowDefinitionError, feature_not_available

if TYPE_CHECKING:
    from dex._context import Context
    from dex._decisions import StepDecision

__all__ = ["Flow", "PersistenceSchema", "StateDeclaration", "StepList"]

T = TypeVar("T")
StartT = TypeVar("StartT")

StateDeclaration = Attribute[Any] | AttributeMap[Any] | Channel[Any] | ChannelMap[Any] | Stream[Any]


def _as_step(step: Any) -> Step[Any]:
    if isinstance(step, type) and issubclass(step, Step):
        return step()
    if isinstance(step, Step):
        return step
    raise FlowDefinitionError(f"not a Step instance or class: {step!r}")


@dataclass(frozen=True, slots=True)
class _StepDef:
    """One Step of a StepList, and whether it is the start Step."""

    step: Step[Any]
    is_start_step: bool


@dataclass(frozen=True, slots=True)
class StepList(Generic[StartT]):
    """The Steps of a Flow: zero or one start Step plus other Steps.

    ``StepList[T]`` is the list of a Flow whose start input is ``T``. Build it with
    ``StepList.start_step(s).other_steps(...)``, ``StepList.without_start_step(...)`` or
    ``StepList.empty()``; iterating it yields each Step with ``is_start_step``. Accepts Step
    instances or Step classes (instantiated without arguments).
    """

    _definitions: tuple[_StepDef, ...] = ()

    def __iter__(self) -> Iterator[_StepDef]:
        return iter(self._definitions)

    @property
    def start(self) -> Step[Any] | None:
        """The start Step, or None when the Flow has none."""
        for d in self._definitions:
            if d.is_start_step:
                return d.step
        return None

    @property
    def steps(self) -> tuple[Step[Any], ...]:
        """Every Step, the start Step first."""
        return tuple(d.step for d in self._definitions)

    @staticmethod
    def start_step(step: Step[StartT] | type[Step[StartT]]) -> StepList[StartT]:
        """Return a list whose start Step is ``step``; add the rest with ``.other_steps(...)``."""
        return StepList((_StepDef(_as_step(step), True),))

    def other_steps(self, *steps: Step[Any] | type[Step[Any]]) -> StepList[StartT]:
        """Return a copy with more (non-start) Steps."""
        more = tuple(_StepDef(_as_step(s), False) for s in steps)
        return StepList(self._definitions + more)

    @classmethod
    def without_start_step(cls, *steps: Step[Any] | type[Step[Any]]) -> StepList[StartT]:
        """Return steps of a Flow without a start Step (its start input is None; RPCs drive it)."""
        return cls(tuple(_StepDef(_as_step(s), False) for s in steps))

    @classmethod
    def empty(cls) -> StepList[StartT]:
        """No Steps at all (an RPC-only Flow)."""
        return cls(())


_ATTRIBUTE_KINDS = (Attribute, AttributeMap)
_CHANNEL_KINDS = (Channel, ChannelMap)


class Flow(Generic[T]):
    """Base class of a Flow whose start input is ``T``.

    Override ``get_steps()`` and ``get_persistence_schema()``; add ``@rpc`` methods. Register
    one instance in a ``Registry`` and pass that same instance to Client calls. The start
    Step's input type is the Flow's start input; a Flow without a start Step starts with
    None and is driven by RPCs.
    """

    def get_flow_type(self) -> str:
        """Return the Flow type name, unique in a Registry. Defaults to the class name."""
        return type(self).__name__

    def get_steps(self) -> StepList[T]:
        """Return the Flow's Steps. Default: none."""
        return StepList.empty()

    def get_persistence_schema(self) -> PersistenceSchema:
        """Return the Flow's state declarations. Default: none."""
        return PersistenceSchema.of()

    def get_schedule_to_start_timeout(self) -> timedelta | float | None:
        """Return the schedule-to-start timeout of this Flow's Steps (timedelta or seconds).

        It applies to every Step attempt whose options (the Step type's, or a movement's)
        set no ``StepOptions.schedule_to_start_timeout`` of their own: a ready attempt no
        Worker takes within it fails with ``SCHEDULE_TO_START_TIMEOUT`` and follows its
        retry policy. Default None: the server's default, which is to wait for a Worker
        as long as it takes.
        """
        return None

    def handle_timeout(self, context: Context) -> StepDecision:
        """Decide what a Flow whose soft timeout passed does; return any ``StepDecision``.

        Runs once per run, on a Worker, as an Execute-like invocation of Step type
        ``sys:timeout_handler`` (``context.step_type``), when the Flow was started with
        ``StartFlowOptions(timeout=...)`` and the policy ``HANDLER``, or ``DEFAULT`` with
        this method overridden. The Flow's other Steps keep running meanwhile: return
        ``force_complete`` / ``force_fail`` to end it, ``go_to`` to add a Step, or
        ``dead_end()`` to let it go on. Attribute writes and Channel publishes commit with
        the decision. ``StartFlowOptions.timeout_handler_options`` gives its method
        timeout, retries, locks, loads and a failure route; without a route, a handler
        that fails for good fails the Flow. The method may be ``async def``.

        The default raises ``FeatureNotAvailableError``: with the ``HANDLER`` policy and
        no override the handler fails (and a ``DEFAULT`` policy never calls it).
        """
        feature_not_available("Flow timeouts handled by Flow.handle_timeout (not overridden)")
