"""StepDecision and StepMovement: what ``execute`` returns."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

from dex.errors import InvalidStepResultError

if TYPE_CHECKING:
    from dex._options import StepOptions
    from dex._step import Step

__all__ = ["StepDecision", "StepMovement"]


DecisionKind = Literal["go_to", "graceful_complete", "force_complete", "force_fail", "dead_end"]


@dataclass(frozen=True, slots=True)
class StepMovement:
    """One next Step: its class, input, and optional options replacing its own.

    Build with ``StepMovement.of(StepCls, input, options=None)``.
    """

    step: type[Step[Any]] | Step[Any]
    input: Any = None
    options: StepOptions | None = None

    @staticmethod
    def of(
        step: type[Step[Any]] | Step[Any], input: Any = None, options: StepOptions | None = None
    ) -> StepMovement:
        """Return a movement to ``step`` (a Step class registered in the same Flow)."""
        return StepMovement(step, input, options)


@dataclass(frozen=True, slots=True)
class StepDecision:
    """What happens after ``execute``. Build it with the factories.

    A decision naming a Step class that is not in the Flow, or a ``go_to_many()`` with no
    movement, fails the attempt with ``InvalidStepResultError`` (not retried; the Flow
    fails with ``INVALID_USER_FLOW_CODE`` unless the Step has a failure route); nothing of
    that attempt is committed.
    """

    kind: DecisionKind
    movements: tuple[StepMovement, ...] = ()
    output: Any = None
    reason: str | None = None
    cancel_steps: tuple[type[Step[Any]] | Step[Any], ...] = ()
    cancel_sibling_steps: tuple[type[Step[Any]] | Step[Any], ...] = ()

    @staticmethod
    def go_to(step: type[Step[Any]] | Step[Any], input: Any = None) -> StepDecision:
        """Schedule one next Step with ``input`` (``go_to(SelfCls, ...)`` waits again)."""
        return StepDecision("go_to", (StepMovement(step, input),))

    @staticmethod
    def go_to_many(*movements: StepMovement) -> StepDecision:
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
        return StepDecision("go_to", tuple(movements))

    @staticmethod
    def graceful_complete(output: Any = None) -> StepDecision:
        """End this branch; the Flow completes once nothing is queued, running or waiting.

        Every graceful output (None = no output) is in the Flow's result.
        """
        return StepDecision("graceful_complete", output=output)

    @staticmethod
    def force_complete(output: Any = None) -> StepDecision:
        """Complete the Flow now, cancelling every other active Step."""
        return StepDecision("force_complete", output=output)

    @staticmethod
    def force_fail(reason: str) -> StepDecision:
        """Fail the Flow now with ``reason``, cancelling every other active Step."""
        return StepDecision("force_fail", reason=reason)

    @staticmethod
    def dead_end() -> StepDecision:
        """End this branch only; the Flow stays open (for RPCs and other branches)."""
        return StepDecision("dead_end")

    def with_canceling_steps(self, *steps: type[Step[Any]] | Step[Any]) -> StepDecision:
        """Also cancel every other live execution of these Step types once this commits."""
        return replace(self, cancel_steps=self.cancel_steps + steps)

    def with_canceling_sibling_steps(self, *steps: type[Step[Any]] | Step[Any]) -> StepDecision:
        """Also cancel live executions of these types scheduled by the same execution."""
        return replace(self, cancel_sibling_steps=self.cancel_sibling_steps + steps)
