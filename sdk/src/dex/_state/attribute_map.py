"""AttributeMap: a family of independently stored values keyed by runtime strings."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from dex._state._common import (
    AttributeLock,
    AttributeMapLoad,
    check_map_key,
    check_name,
    instance_key,
    instance_name,
    invocation,
)
from dex._state._decoded import DECODED_CACHE
from dex._state._durable import AttributeIndex, check_durable_options
from dex.errors import AttributeMapNotLoadedError, DexError

if TYPE_CHECKING:
    from dex._context import Context, _Invocation
    from dex._invoke import StateReader

T = TypeVar("T")


class AttributeMap(Generic[T]):
    """A map of durable values of type ``T``; each key is stored on its own.

    Loading is opt-in: a method or RPC receives only the instances it declared
    (``*_load_attribute_maps`` for the whole map, ``*_load_attribute_map_instances`` with
    ``amap.load(key)`` for single keys). Reading an instance that was not loaded raises
    ``AttributeMapNotLoadedError``; writing never needs a load. Keys are non-empty
    strings (any character, ``/`` included); every method that takes a key raises
    ``InvalidMapKeyError`` for any other key.

    An ``async`` handler can also read instances on demand, while it runs, with
    ``await amap.load_range(context, ...)`` or ``await amap.load_keys(context, keys)``: only what
    it asks for travels, so a method that needs the tail of a large map does not load it
    whole.

    Args:
        name: unique, non-empty, without ``/``.
        value_type: the declared type of every instance.
        index: a search index (it needs an explicit ``index_key``; every instance write
            overwrites the one search field). Default None.
        sync_to_attribute_store: as for ``Attribute``; True is not available yet.
        hard_delete_on_null: as for ``Attribute``; True is not available yet.

    Raises:
        FlowDefinitionError: an invalid name, or hard delete with an index or sync.
        TypeError: an option of the wrong type, or hard delete of an int, float or bool.

    """

    kind = "attribute_map"

    def __init__(
        self,
        name: str,
        value_type: type[T],
        index: AttributeIndex | None = None,
        sync_to_attribute_store: bool = False,
        hard_delete_on_null: bool = False,
    ) -> None:
        self.name = check_name(name, "AttributeMap")
        self.value_type: Any = value_type
        check_durable_options(
            "AttributeMap", name, value_type, index, sync_to_attribute_store, hard_delete_on_null
        )
        self.index = index
        self.sync_to_attribute_store = sync_to_attribute_store
        self.hard_delete_on_null = hard_delete_on_null

    def _loaded(self, inv: _Invocation, physical: str) -> bool:
        task = inv.task
        return (
            physical in inv.writes
            or physical in inv.fetched
            or self.name in task.loaded_maps
            or physical in task.loaded_map_instances
        )

    def get(self, context: Context, instance: str) -> T | None:
        """Return the instance's value, or None when unset.

        Raises:
            AttributeMapNotLoadedError: the instance was not loaded by this method or RPC.

        """
        inv = invocation(context, self, "attribute_map")
        physical = instance_name(self.name, instance)
        if not self._loaded(inv, physical):
            raise AttributeMapNotLoadedError(
                f"AttributeMap {self.name!r} instance {instance!r} was not loaded; declare it with "
                f"load_attribute_maps or load_attribute_map_instances"
            )
        data = inv.read(physical)
        if data is None:
            return None
        if physical in inv.fetched and physical not in inv.writes:
            shared: T = DECODED_CACHE.decode(self.value_type, inv.codec, data)
            return shared
        value: T = inv.codec(self.value_type).decode(data)
        return value

    async def load_range(
        self,
        context: Context,
        start_key: str | None = None,
        end_key: str | None = None,
        *,
        limit: int | None = None,
    ) -> list[tuple[str, T]]:
        """Read committed instances with ``start_key <= key < end_key`` from the server now.

        For ``async`` Step methods and RPCs whose map is too large to load whole. The
        Worker asks the server over its connection; the instances found become readable
        with :meth:`get` for the rest of this invocation (keys in the range that are not
        returned stay "not loaded", unless the map was loaded otherwise).

        Order and bounds compare the URL-quoted keys (the physical names) byte by byte:
        for keys made of ASCII letters, digits and ``-._~`` this is plain lexical order.
        Use fixed-width keys (zero-padded numbers) to read numeric ranges.

        Consistency: the values are the committed state when the server reads them, not
        the task's snapshot, and they do not include this invocation's staged writes.
        Instances written only by the Flow's own Steps one after another (an append-only
        log, for instance) read consistently; concurrent writers may be seen half-way.
        Values of frozen types (frozen msgspec Structs or dataclasses, scalars) are
        decoded once per Worker process and shared, so do not mutate their contents.

        Args:
            context: the running handler's context.
            start_key: first key (inclusive); ``None`` starts at the map's first key.
            end_key: end key (exclusive); ``None`` runs to the map's last key.
            limit: at most this many instances (``None``: no limit).

        Returns:
            ``(key, value)`` pairs in key order.

        Raises:
            DexError: outside a handler run by a Worker, or ``limit < 1``.
            FlowNotActiveOrNotFoundError: the task is no longer running on the server.
            BadRequestError: the map is not declared in the Flow the server knows.

        """
        if limit is not None and limit < 1:
            raise DexError(f"limit must be at least 1, got {limit}")
        inv, reader = self._reader(context)
        start = instance_name(self.name, start_key) if start_key is not None else None
        end = instance_name(self.name, end_key) if end_key is not None else None
        answer = await reader.read_state(self.name, names=None, start=start, end=end, limit=limit)
        out: list[tuple[str, T]] = []
        for physical in answer.names:
            data = bytes(answer.values[physical])
            inv.fetched[physical] = data
            value: T = DECODED_CACHE.decode(self.value_type, inv.codec, data)
            out.append((instance_key(physical), value))
        return out

    async def load_keys(self, context: Context, keys: Iterable[str]) -> dict[str, T | None]:
        """Read the committed values of ``keys`` from the server now (None when unset).

        Like :meth:`load_range` (same consistency and sharing), for known keys: every key
        becomes readable with :meth:`get` for the rest of this invocation.

        Returns:
            Each requested key with its value, or None when it is unset.

        Raises:
            DexError: outside a handler run by a Worker.
            FlowNotActiveOrNotFoundError: the task is no longer running on the server.
            BadRequestError: the map is not declared in the Flow the server knows.

        """
        inv, reader = self._reader(context)
        physical = {key: instance_name(self.name, key) for key in keys}
        if not physical:
            return {}
        names = list(dict.fromkeys(physical.values()))
        answer = await reader.read_state(self.name, names=names, start=None, end=None, limit=None)
        out: dict[str, T | None] = {}
        for key, name in physical.items():
            raw = answer.values.get(name)
            data = None if raw is None else bytes(raw)
            inv.fetched[name] = data
            if data is None:
                out[key] = None
            else:
                out[key] = DECODED_CACHE.decode(self.value_type, inv.codec, data)
        return out

    def _reader(self, context: Context) -> tuple[_Invocation, StateReader]:
        inv = invocation(context, self, "attribute_map")
        reader = getattr(inv.io, "read_state", None)
        if reader is None:
            raise DexError(
                f"AttributeMap {self.name!r}: on-demand reads need a handler run by a Worker"
            )
        return inv, cast("StateReader", inv.io)

    def set(self, context: Context, instance: str, value: T | None) -> None:
        """Stage a new value for ``instance`` (``None`` deletes it)."""
        inv = invocation(context, self, "attribute_map")
        physical = instance_name(self.name, instance)
        inv.writes[physical] = None if value is None else inv.codec(self.value_type).encode(value)

    def delete(self, context: Context, instance: str) -> None:
        """Stage the deletion of ``instance``."""
        inv = invocation(context, self, "attribute_map")
        inv.writes[instance_name(self.name, instance)] = None

    def get_all_instance_keys(self, context: Context) -> tuple[str, ...]:
        """Every set key, sorted ascending, including this invocation's staged writes.

        Raises:
            AttributeMapNotLoadedError: the whole map was not loaded.

        """
        inv = invocation(context, self, "attribute_map")
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
        return tuple(sorted(instance_key(n) for n in names))

    def get_map_size(self, context: Context) -> int:
        """How many keys are set (needs the whole map loaded, like listing keys)."""
        return len(self.get_all_instance_keys(context))

    def lock(self, instance: str) -> AttributeLock:
        """Return a lock on one instance (for ``*_lock_attributes``).

        Raises:
            InvalidMapKeyError: ``instance`` is not a non-empty string.

        """
        return AttributeLock(self, check_map_key(self.name, instance))

    def load(self, instance: str) -> AttributeMapLoad:
        """Return a load request for one instance (for ``*_load_attribute_map_instances``).

        Raises:
            InvalidMapKeyError: ``instance`` is not a non-empty string.

        """
        return AttributeMapLoad(self, instance)

    def __repr__(self) -> str:
        return f"AttributeMap({self.name!r})"
