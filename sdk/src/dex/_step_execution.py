"""Identifiers of one Step execution and of one timer inside it."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StepExecutionId", "TimerId"]


@dataclass(frozen=True)
class StepExecutionId:
    """One execution of a Step type in a Flow: the ``number``-th of ``step_type``.

    The server numbers the executions of each Step type from 1 within a Flow, and writes
    them as ``"<step_type>-<number>"`` (``str()`` gives that form).

    Attributes:
        step_type: the Step type name.
        number: which execution of it (default 1, the first).

    """

    step_type: str
    number: int = 1

    def __str__(self) -> str:
        return f"{self.step_type}-{self.number}"


@dataclass(frozen=True)
class TimerId:
    """Selects one timer of a Step's wait: by its condition ID or by its index in the wait.

    Give exactly one of the two; ``TimerId.by_condition_id("reminder")`` and
    ``TimerId.by_condition_index(0)`` say which.

    Raises:
        ValueError: neither or both selectors are given.

    """

    condition_id: str | None = None
    condition_index: int | None = None

    def __post_init__(self) -> None:
        if (self.condition_id is None) == (self.condition_index is None):
            raise ValueError("TimerId needs exactly one of condition_id and condition_index")

    @staticmethod
    def by_condition_id(condition_id: str) -> TimerId:
        """Select the timer whose condition has this ``condition_id``."""
        return TimerId(condition_id=condition_id)

    @staticmethod
    def by_condition_index(condition_index: int) -> TimerId:
        """Select the timer at this position among the wait's timers (from 0).

        Only timers are counted: in ``any_of(channel, timer)`` the timer has index 0.
        """
        return TimerId(condition_index=condition_index)
