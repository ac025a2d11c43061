"""Flow: a named set of Steps, state declarations and RPCs."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, TypeVar

from dex._state import Attribute, AttributeMap, Channel, ChannelMap, PersistenceSchema, Stream
from dex._step import Step
from dex.errors import FlowDefinitionError

__all__ = ["Flow", "PersistenceSchema", "StateDeclaration", "StepList"]

T = TypeVar("T")

StateDeclaration = Attribute[Any] | AttributeMap[Any] | Channel[Any] | ChannelMap[Any] | Stream[Any]


def _as_step(step: Any) -> Step[Any]:
    if isinstance(step, type) and issubclass(step, Step):
        return step()
    if isinstance(step, Step):
        return step
    raise FlowDefinitionError(f"not a Step instance or class: {step!r}")


@dataclass(frozen=True, slots=True)
class StepList:
    """The Steps of a Flow: zero or one start Step plus other Steps.

    Accepts Step instances or Step classes (instantiated without arguments).
    """

    start: Step[Any] | None
    steps: tuple[Step[Any], ...]

    @staticmethod
    def start_step(step: Step[Any] | type[Step[Any]]) -> StepList:
        """Return a list whose start Step is ``step``; add the rest with ``.other_steps(...)``."""
        s = _as_step(step)
        return StepList(s, (s,))

    def other_steps(self, *steps: Step[Any] | type[Step[Any]]) -> StepList:
        """Return a copy with more (non-start) Steps."""
        return StepList(self.start, self.steps + tuple(_as_step(s) for s in steps))

    @staticmethod
    def without_start_step(*steps: Step[Any] | type[Step[Any]]) -> StepList:
        """Return steps of a Flow without a start Step (its start input is None; RPCs drive it)."""
        return StepList(None, tuple(_as_step(s) for s in steps))

    @staticmethod
    def empty() -> StepList:
        """No Steps at all (an RPC-only Flow)."""
        return StepList(None, ())


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

    def get_steps(self) -> StepList:
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
