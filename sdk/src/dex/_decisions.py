"""StepDecision and StepMovement: what ``execute`` returns, and the decision functions."""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dex.errors import InvalidStepResultError

if TYPE_CHECKING:
    from dex._options import StepOptions
    from dex._state import Channel, ChannelMap
    from dex._step import Step

__all__ = [
    "DecisionKind",
    "StepDecision",
    "StepMovement",
    "dead_end",
    "force_complete",
    "force_complete_if_channels_empty",
    "force_fail",
    "go_to",
    "go_to_many",
    "graceful_complete",
]

InputT = TypeVar("InputT")


class DecisionKind(enum.StrEnum):
    """What a ``StepDecision`` does; build decisions with the functions, not by kind."""

    NEXT = "next"
    """Schedule one or more next Steps (``go_to``, ``go_to_many``)."""
    GRACEFUL_COMPLETE = "graceful_complete"
    FORCE_COMPLETE = "force_complete"
    FORCE_COMPLETE_IF_CHANNELS_EMPTY = "force_complete_if_channels_empty"
    FORCE_FAIL = "force_fail"
    DEAD_END = "dead_end"


# spellings our earlier releases used for DecisionKind.NEXT
_KIND_ALIASES = {"go_to": DecisionKind.NEXT}


@dataclass(frozen=True, slots=True)
class StepMovement(Generic[InputT]):
    """One next Step: its class, input, and optional options replacing its own.

    Build with ``StepMovement.of(StepCls, input, options=None)``; ``StepMovement[T]``
    names the type of a movement whose input is ``T``.
    """

    step: type[Step[InputT]] | Step[InputT]
    input: InputT | None = None
    options: StepOptions | None = None

    @staticmethod
    def of(
        step: type[Step[InputT]] | Step[InputT],
        input: InputT | None = None,
        options: StepOptions | None = None,
    ) -> StepMovement[InputT]:
        """Return a movement to ``step`` (a Step class registered in the same Flow)."""
        return StepMovement(step, input, options)


@dataclass(frozen=True, slots=True)
class StepDecision:
    """What happens after ``execute``. Build it with the decision functions.

    Fields, in positional order: ``kind``, ``movements`` (``NEXT``), ``output`` (None: no
    output), ``reason`` (``FORCE_FAIL``), ``empty_channels`` and ``fallback``
    (``FORCE_COMPLETE_IF_CHANNELS_EMPTY``), ``canceling_steps`` and
    ``canceling_sibling_steps`` (see ``with_canceling_steps``). ``kind`` also accepts its
    string value.

    A decision naming a Step class that is not in the Flow, or a ``go_to_many()`` with no
    movement, fails the attempt with ``InvalidStepResultError`` (not retried; the Flow
    fails with ``INVALID_USER_FLOW_CODE`` unless the Step has a failure route); nothing of
    that attempt is committed.
    """

    kind: DecisionKind
    movements: tuple[StepMovement[Any], ...] = ()
    output: Any = None
    reason: str = ""
    empty_channels: tuple[Channel[Any] | ChannelMap[Any], ...] = ()
    fallback: StepMovement[Any] | None = None
    canceling_steps: tuple[type[Step[Any]] | Step[Any], ...] = ()
    canceling_sibling_steps: tuple[type[Step[Any]] | Step[Any], ...] = ()

    def __post_init__(self) -> None:
        kind: object = self.kind
        if not isinstance(kind, DecisionKind):
            try:
                kind = _KIND_ALIASES.get(kind) or DecisionKind(kind)  # type: ignore[call-overload, arg-type]
            except (ValueError, TypeError):
                raise ValueError(f"not a DecisionKind: {self.kind!r}") from None
            object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "reason", "" if self.reason is None else self.reason)

    @property
    def cancel_steps(self) -> tuple[type[Step[Any]] | Step[Any], ...]:
        """Same as ``canceling_steps``."""
        return self.canceling_steps

    @property
    def cancel_sibling_steps(self) -> tuple[type[Step[Any]] | Step[Any], ...]:
        """Same as ``canceling_sibling_steps``."""
        return self.canceling_sibling_steps

    # The factories are also available as module functions (``dex.go_to`` and so on).

    @staticmethod
    def go_to(step: type[Step[Any]] | Step[Any], input: Any = None) -> StepDecision:
        """Same as ``dex.go_to``."""
        return go_to(step, input)

    @staticmethod
    def go_to_many(*movements: StepMovement[Any]) -> StepDecision:
        """Same as ``dex.go_to_many``."""
        return go_to_many(*movements)

    @staticmethod
    def graceful_complete(output: Any = None) -> StepDecision:
        """Same as ``dex.graceful_complete``."""
        return graceful_complete(output)

    @staticmethod
    def force_complete(output: Any = None) -> StepDecision:
        """Same as ``dex.force_complete``."""
        return force_complete(output)

    @staticmethod
    def force_fail(reason: str) -> StepDecision:
        """Same as ``dex.force_fail``."""
        return force_fail(reason)

    @staticmethod
    def dead_end() -> StepDecision:
        """Same as ``dex.dead_end``."""
        return dead_end()

    def with_canceling_steps(self, *steps: type[Step[Any]] | Step[Any]) -> StepDecision:
        """Also cancel every other live execution of these Step types once this commits."""
        return replace(self, canceling_steps=self.canceling_steps + steps)

    def with_canceling_sibling_steps(self, *steps: type[Step[Any]] | Step[Any]) -> StepDecision:
        """Also cancel live executions of these types scheduled by the same execution."""
        return replace(self, canceling_sibling_steps=self.canceling_sibling_steps + steps)


def go_to(step: type[Step[InputT]] | Step[InputT], input: InputT | None = None) -> StepDecision:
    """Schedule one next Step with ``input`` (``go_to(SelfCls, ...)`` waits again)."""
    return StepDecision(DecisionKind.NEXT, (StepMovement(step, input),))


def go_to_many(*movements: StepMovement[Any]) -> StepDecision:
    """Schedule several Steps in parallel (each movement with its own input/options).

    Raises:
        InvalidStepResultError: no movement (end a branch with ``dead_end()``). Raised
            in ``execute``, it fails the attempt as invalid user code (not retried).
        TypeError: a value that is not a ``StepMovement``.

    """
    if not movements:
        raise InvalidStepResultError(
            "",
            None,
            "execute",
            "go_to_many() needs at least one StepMovement; use dead_end() to end a branch",
        )
    for m in movements:
        if not isinstance(m, StepMovement):
            raise TypeError(f"go_to_many takes StepMovement.of(...) values, got {m!r}")
    return StepDecision(DecisionKind.NEXT, tuple(movements))


def graceful_complete(output: Any = None) -> StepDecision:
    """End this branch; the Flow completes once nothing is queued, running or waiting.

    Every graceful output (None = no output) is in the Flow's result.
    """
    return StepDecision(DecisionKind.GRACEFUL_COMPLETE, output=output)


def force_complete(output: Any = None) -> StepDecision:
    """Complete the Flow now with ``output``, cancelling every other active Step."""
    return StepDecision(DecisionKind.FORCE_COMPLETE, output=output)


def force_complete_if_channels_empty(
    output: Any, fallback: StepMovement[Any], *channels: Channel[Any] | ChannelMap[Any]
) -> StepDecision:
    """Complete the Flow with ``output`` if ``channels`` hold no message, else go to ``fallback``.

    The server decides when it commits this ``execute`` result, atomically with it: when
    every listed Channel and every instance of every listed ChannelMap is empty (counting
    messages this execute publishes), the Flow completes as with ``force_complete``;
    otherwise ``fallback`` is scheduled as with ``go_to``. Use it to finish a consumer
    loop without losing a message published meanwhile; each listed Channel should be
    consumed by one Step type only. The history's ``StepExecuteCompleted`` event says
    which branch was taken (``resolvedDecision``).

    Raises:
        TypeError: ``fallback`` is not a ``StepMovement``.

    """
    if not isinstance(fallback, StepMovement):
        raise TypeError(f"fallback must be a StepMovement, got {fallback!r}")
    return StepDecision(
        DecisionKind.FORCE_COMPLETE_IF_CHANNELS_EMPTY,
        output=output,
        empty_channels=tuple(channels),
        fallback=fallback,
    )


def force_fail(reason: str) -> StepDecision:
    """Fail the Flow now with ``reason`` (its ``error_message``), cancelling other Steps."""
    return StepDecision(DecisionKind.FORCE_FAIL, reason=reason)


def dead_end() -> StepDecision:
    """End this branch only; the Flow stays open (for RPCs and other branches)."""
    return StepDecision(DecisionKind.DEAD_END)
