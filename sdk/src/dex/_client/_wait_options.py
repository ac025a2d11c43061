"""Options and matchers of the Client's blocking waits on a Step or an Attribute."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import Generic, TypeVar

__all__ = ["AttributeMatch", "WaitForAttributeOptions", "WaitForStepCompletionOptions"]

T = TypeVar("T")


@dataclass(frozen=True)
class WaitForStepCompletionOptions:
    """Options of ``wait_for_step_completion``.

    Attributes:
        request_id: accepted for compatibility and not sent (the wait changes nothing,
            so it needs no idempotency key).
        request_timeout: give up after this long (``timedelta(0)``: wait forever).
        internal_handler_timeout: the server's own wait per poll (``timedelta(0)``: its
            default, 60 s, also the cap).

    """

    request_id: str = ""
    request_timeout: timedelta = timedelta(0)
    internal_handler_timeout: timedelta = timedelta(0)


@dataclass(frozen=True)
class WaitForAttributeOptions:
    """Options of ``wait_for_attribute_match``.

    Attributes:
        request_id: idempotency key of the wait (``""``: one per call; a wait changes
            nothing, so it is not used).
        request_timeout: give up after this long with ``RequestTimeoutError``
            (``timedelta(0)``: wait forever).
        internal_handler_timeout: the server's own wait per poll (``timedelta(0)``: its
            default, 60 s).

    """

    request_id: str = ""
    request_timeout: timedelta = timedelta(0)
    internal_handler_timeout: timedelta = timedelta(0)


class _MatchOperator(enum.IntEnum):
    EQUAL = 1
    NOT_EQUAL = 2
    GREATER = 3
    GREATER_OR_EQUAL = 4
    LESS = 5
    LESS_OR_EQUAL = 6


@dataclass(frozen=True)
class AttributeMatch(Generic[T]):
    """A condition on an Attribute's value for ``wait_for_attribute_match``.

    Build it with the class methods: ``AttributeMatch.equal_to(3)``,
    ``AttributeMatch.greater_than(0)``, and so on (``AttributeMatch()`` matches null).
    """

    _operator: _MatchOperator = _MatchOperator.EQUAL
    _operand: T | None = None

    @classmethod
    def equal_to(cls, operand: T) -> AttributeMatch[T]:
        """Match a value equal to ``operand``."""
        return cls(_MatchOperator.EQUAL, operand)

    @classmethod
    def not_equal_to(cls, operand: T) -> AttributeMatch[T]:
        """Match a value other than ``operand``."""
        return cls(_MatchOperator.NOT_EQUAL, operand)

    @classmethod
    def greater_than(cls, operand: T) -> AttributeMatch[T]:
        """Match a value greater than ``operand``."""
        return cls(_MatchOperator.GREATER, operand)

    @classmethod
    def greater_than_or_equal(cls, operand: T) -> AttributeMatch[T]:
        """Match a value greater than or equal to ``operand``."""
        return cls(_MatchOperator.GREATER_OR_EQUAL, operand)

    @classmethod
    def less_than(cls, operand: T) -> AttributeMatch[T]:
        """Match a value less than ``operand``."""
        return cls(_MatchOperator.LESS, operand)

    @classmethod
    def less_than_or_equal(cls, operand: T) -> AttributeMatch[T]:
        """Match a value less than or equal to ``operand``."""
        return cls(_MatchOperator.LESS_OR_EQUAL, operand)
