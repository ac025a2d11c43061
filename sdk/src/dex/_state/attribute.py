"""Attribute: one durable value of a Flow execution."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dex._state._common import AttributeLock, check_name, invocation
from dex._state._durable import AttributeIndex, check_durable_options

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
        index: a search index over the value (``search_flows`` queries it). Default None.
        sync_to_attribute_store: project the latest value into the Attribute Store.
            Default False; True is not available yet (``FeatureNotAvailableError`` from the
            schema).
        hard_delete_on_null: keep the value out of history, so that ``None`` or a delete
            erases it (for secrets). Default False; True is not available yet
            (``FeatureNotAvailableError`` from the schema). Only ``str`` and object types,
            and neither index nor sync, may ask for it.

    Raises:
        FlowDefinitionError: an invalid name, or hard delete with an index or sync.
        TypeError: an option of the wrong type, or hard delete of an int, float or bool.

    """

    kind = "attribute"

    def __init__(
        self,
        name: str,
        value_type: type[T],
        index: AttributeIndex | None = None,
        sync_to_attribute_store: bool = False,
        hard_delete_on_null: bool = False,
    ) -> None:
        self.name = check_name(name, "Attribute")
        self.value_type: Any = value_type
        check_durable_options(
            "Attribute", name, value_type, index, sync_to_attribute_store, hard_delete_on_null
        )
        self.index = index
        self.sync_to_attribute_store = sync_to_attribute_store
        self.hard_delete_on_null = hard_delete_on_null

    def get(self, context: Context) -> T | None:
        """Return the value; None when unset (``0``/``0.0``/``False`` for int/float/bool)."""
        inv = invocation(context, self, "attribute")
        data = inv.read(self.name)
        if data is None:
            return _ZERO.get(self.value_type)  # type: ignore[return-value]
        value: T = inv.codec(self.value_type).decode(data)
        return value

    def set(self, context: Context, value: T | None) -> None:
        """Stage a new value (``None`` deletes). Raises ValueMappingError on a type mismatch."""
        inv = invocation(context, self, "attribute")
        inv.writes[self.name] = None if value is None else inv.codec(self.value_type).encode(value)

    def delete(self, context: Context) -> None:
        """Stage the deletion of this Attribute."""
        invocation(context, self, "attribute").writes[self.name] = None

    def lock(self) -> AttributeLock:
        """Return a lock for ``*_lock_attributes`` or ``@rpc(lock_attributes=...)``."""
        return AttributeLock(self)

    def __repr__(self) -> str:
        return f"Attribute({self.name!r})"
