"""AttributeMap: a family of independently stored values keyed by runtime strings."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, TypeVar

from dex._state._common import (
    InstanceLoad,
    LockKey,
    check_name,
    instance_key,
    instance_name,
    invocation,
)
from dex.errors import AttributeMapNotLoadedError

if TYPE_CHECKING:
    from dex._context import Context, _Invocation

T = TypeVar("T")


class AttributeMap(Generic[T]):
    """A map of durable values of type ``T``; each key is stored on its own.

    Loading is opt-in: a method or RPC receives only the instances it declared
    (``*_load_attribute_maps`` for the whole map, ``*_load_attribute_map_instances`` with
    ``amap.load(key)`` for single keys). Reading an instance that was not loaded raises
    ``AttributeMapNotLoadedError``; writing never needs a load. Keys are non-empty strings.

    Args:
        name: unique, non-empty, without ``/``.
        value_type: the declared type of every instance.

    """

    kind = "attribute_map"

    def __init__(self, name: str, value_type: type[T]) -> None:
        self.name = check_name(name, "AttributeMap")
        self.value_type: Any = value_type

    def _loaded(self, inv: _Invocation, physical: str) -> bool:
        task = inv.task
        return (
            physical in inv.writes
            or self.name in task.loaded_maps
            or physical in task.loaded_map_instances
        )

    def get(self, ctx: Context, key: str) -> T | None:
        """Return the instance's value, or None when unset.

        Raises:
            AttributeMapNotLoadedError: the instance was not loaded by this method or RPC.

        """
        inv = invocation(ctx, self, "attribute_map")
        physical = instance_name(self.name, key)
        if not self._loaded(inv, physical):
            raise AttributeMapNotLoadedError(
                f"AttributeMap {self.name!r} instance {key!r} was not loaded; declare it with "
                f"load_attribute_maps or load_attribute_map_instances"
            )
        data = inv.read(physical)
        if data is None:
            return None
        value: T = inv.codec(self.value_type).decode(data)
        return value

    def set(self, ctx: Context, key: str, value: T | None) -> None:
        """Stage a new value for ``key`` (``None`` deletes it)."""
        inv = invocation(ctx, self, "attribute_map")
        physical = instance_name(self.name, key)
        inv.writes[physical] = None if value is None else inv.codec(self.value_type).encode(value)

    def delete(self, ctx: Context, key: str) -> None:
        """Stage the deletion of ``key``."""
        inv = invocation(ctx, self, "attribute_map")
        inv.writes[instance_name(self.name, key)] = None

    def get_all_instance_keys(self, ctx: Context) -> list[str]:
        """Every set key, sorted ascending, including this invocation's staged writes.

        Raises:
            AttributeMapNotLoadedError: the whole map was not loaded.

        """
        inv = invocation(ctx, self, "attribute_map")
        if self.name not in inv.task.loaded_maps:
            raise AttributeMapNotLoadedError(
                f"listing AttributeMap {self.name!r} needs the whole map loaded "
                f"(load_attribute_maps)"
            )
        prefix = self.name + "/"
        names = {n for n in inv.task.attributes if n.startswith(prefix)}
        for n, v in inv.writes.items():
            if n.startswith(prefix):
                if v is None:
                    names.discard(n)
                else:
                    names.add(n)
        return sorted(instance_key(n) for n in names)

    def get_map_size(self, ctx: Context) -> int:
        """How many keys are set (needs the whole map loaded, like listing keys)."""
        return len(self.get_all_instance_keys(ctx))

    def lock(self, key: str) -> LockKey:
        """Return a lock key for one instance (for ``*_lock_attributes``)."""
        return LockKey(name=self.name, kind="attribute_map", physical=instance_name(self.name, key))

    def load(self, key: str) -> InstanceLoad:
        """Return a load request for one instance (for ``*_load_attribute_map_instances``)."""
        return InstanceLoad(
            name=self.name, kind="attribute_map", key=key, physical=instance_name(self.name, key)
        )

    def __repr__(self) -> str:
        return f"AttributeMap({self.name!r})"
