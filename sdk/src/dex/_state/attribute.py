"""Attribute: one durable value of a Flow execution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dex._state._common import LockKey, check_name, invocation

if TYPE_CHECKING:
    from dex._context import Context

T = TypeVar("T")

_ZERO: dict[object, object] = {int: 0, float: 0.0, bool: False}


class Attribute(Generic[T]):
    """A durable value of type ``T``, declared in the Flow's persistence schema.

    Every Step method and RPC receives all Attributes. ``set``/``delete`` stage the write in
    the current invocation; it commits with the handler's result, and later reads in the same
    invocation see it.

    Args:
        name: unique, non-empty, without ``/``.
        value_type: the declared type (needs a codec).

    """

    kind = "attribute"

    def __init__(self, name: str, value_type: type[T]) -> None:
        self.name = check_name(name, "Attribute")
        self.value_type: Any = value_type

    def get(self, ctx: Context) -> T | None:
        """Return the value; None when unset (``0``/``0.0``/``False`` for int/float/bool)."""
        inv = invocation(ctx, self, "attribute")
        data = inv.read(self.name)
        if data is None:
            return _ZERO.get(self.value_type)  # type: ignore[return-value]
        value: T = inv.codec(self.value_type).decode(data)
        return value

    def set(self, ctx: Context, value: T | None) -> None:
        """Stage a new value (``None`` deletes). Raises ValueMappingError on a type mismatch."""
        inv = invocation(ctx, self, "attribute")
        inv.writes[self.name] = None if value is None else inv.codec(self.value_type).encode(value)

    def delete(self, ctx: Context) -> None:
        """Stage the deletion of this Attribute."""
        invocation(ctx, self, "attribute").writes[self.name] = None

    def lock(self) -> LockKey:
        """Return a lock key for ``*_lock_attributes`` or ``@rpc(lock_attributes=...)``."""
        return LockKey(name=self.name, kind="attribute", physical=self.name)

    def __repr__(self) -> str:
        return f"Attribute({self.name!r})"
