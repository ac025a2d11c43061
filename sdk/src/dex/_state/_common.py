"""Shared pieces of the state handles: physical names, locks, load requests."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, unquote

from dex.errors import FlowDefinitionError, InvalidMapKeyError

if TYPE_CHECKING:
    from dex._context import Context, _Invocation
    from dex._state.attribute import Attribute
    from dex._state.attribute_map import AttributeMap
    from dex._state.channel_map import ChannelMap

StateKind = Literal["attribute", "attribute_map", "channel", "channel_map", "stream"]


def check_name(name: str, what: str) -> str:
    """Validate a declared state name (non-empty, no ``/``)."""
    if not isinstance(name, str) or not name or "/" in name:
        raise FlowDefinitionError(f"{what} name must be a non-empty string without '/': {name!r}")
    return name


def check_map_key(name: str, key: object) -> str:
    """Validate one instance key of the map ``name``: any non-empty string.

    ``/`` and every other character are allowed: :func:`instance_name` URL-quotes the key,
    so a physical name holds exactly one raw ``/``, the separator after the map's name
    (which cannot contain one), and the server and stores split there.

    Raises:
        InvalidMapKeyError: ``key`` is not a string, or is empty.

    """
    if not isinstance(key, str) or not key:
        raise InvalidMapKeyError(f"map key of {name!r} must be a non-empty string, got {key!r}")
    return key


def instance_name(name: str, key: str) -> str:
    """Physical name of one map instance: ``"<name>/<url-quoted key>"``.

    Raises:
        InvalidMapKeyError: ``key`` is not a non-empty string (see :func:`check_map_key`).

    """
    try:
        return _INSTANCE_NAMES[name, key]
    except (KeyError, TypeError):  # TypeError: an unhashable key, refused below
        pass
    check_map_key(name, key)
    if _UNQUOTED.fullmatch(key):  # what quote() leaves as it is (most keys): skip its cost
        full = f"{name}/{key}"
    else:
        full = f"{name}/{quote(key, safe='')}"
    if len(_INSTANCE_NAMES) >= _INSTANCE_NAMES_MAX:
        _INSTANCE_NAMES.clear()
    _INSTANCE_NAMES[name, key] = full
    return full


# Names built lately: a handler reads and writes the same few instances many times (only
# valid keys are kept, so a hit needs no check; cleared when full, a bound for long runs).
_INSTANCE_NAMES: dict[tuple[str, str], str] = {}
_INSTANCE_NAMES_MAX = 4096


# the characters urllib.parse.quote never quotes
_UNQUOTED = re.compile(r"[A-Za-z0-9_.~-]+")


def instance_key(physical: str) -> str:
    """Return the key of a physical map-instance name."""
    return unquote(physical.split("/", 1)[1])


@dataclass(frozen=True, slots=True)
class AttributeLock:
    """A lock on an Attribute, or on one AttributeMap instance.

    Made by ``attr.lock()`` and ``amap.lock(instance)``; pass it in
    ``StepOptions(*_lock_attributes=...)``, ``@rpc(lock_attributes=...)`` or
    ``RPCInvokeOptions(lock_attribute_map_instances=...)``. It unpacks as
    ``(attribute, instance)``. Equal locks compare and hash equal.

    Args:
        attribute: the Attribute or AttributeMap to lock.
        instance: the map instance; None for an Attribute.

    Raises:
        FlowDefinitionError: when used, if an Attribute lock names an instance or an
            AttributeMap lock names none (whole-map locks are not supported).

    """

    attribute: Attribute[Any] | AttributeMap[Any]
    instance: str | None = None

    @property
    def name(self) -> str:
        """The declared name of the locked Attribute or AttributeMap."""
        return self.attribute.name

    @property
    def kind(self) -> Literal["attribute", "attribute_map"]:
        """``"attribute"`` or ``"attribute_map"``."""
        return "attribute" if self.attribute.kind == "attribute" else "attribute_map"

    @property
    def physical(self) -> str:
        """The stored name that is locked (``"<map>/<quoted instance>"`` for a map)."""
        if self.kind == "attribute":
            if self.instance is not None:
                raise FlowDefinitionError(
                    f"a lock on Attribute {self.name!r} takes no instance, got {self.instance!r}"
                )
            return self.name
        if self.instance is None:
            raise FlowDefinitionError(
                f"a lock on AttributeMap {self.name!r} needs an instance: {self.name}.lock(key)"
            )
        return instance_name(self.name, self.instance)

    def __iter__(self) -> Iterator[Any]:
        return iter((self.attribute, self.instance))


LockKey = AttributeLock
"""Another name of :class:`AttributeLock`."""


class InstanceLoad:
    """Base of the requests to load one map instance (AttributeMapLoad, ChannelMapLoad).

    ``name`` is the declared map name, ``key`` the instance, ``physical`` (also
    ``physical_name``) the stored name. A load unpacks as ``(map, instance)``.
    """

    __slots__ = ()

    instance: str
    kind: Literal["attribute_map", "channel_map"]

    def _map(self) -> Any:
        raise NotImplementedError

    @property
    def key(self) -> str:
        """The instance key."""
        return self.instance

    @property
    def name(self) -> str:
        """The declared map name."""
        name: str = self._map().name
        return name

    @property
    def physical_name(self) -> str:
        """The stored name of the instance: ``"<map name>/<url-quoted instance>"``."""
        return instance_name(self.name, self.key)

    @property
    def physical(self) -> str:
        """Same as :attr:`physical_name`."""
        return self.physical_name

    def __iter__(self) -> Iterator[Any]:
        return iter((self._map(), self.key))


@dataclass(frozen=True, slots=True)
class AttributeMapLoad(InstanceLoad):
    """A request to load one AttributeMap instance (``amap.load(instance)``).

    Pass it in ``*_load_attribute_map_instances`` of StepOptions, ``@rpc`` or
    ``RPCInvokeOptions``.

    Raises:
        InvalidMapKeyError: ``instance`` is not a non-empty string.

    """

    attribute_map: AttributeMap[Any]
    instance: str
    kind: Literal["attribute_map", "channel_map"] = field(
        default="attribute_map", init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_map_key(self.attribute_map.name, self.instance)

    def _map(self) -> Any:
        return self.attribute_map


@dataclass(frozen=True, slots=True)
class ChannelMapLoad(InstanceLoad):
    """A request to load the pending messages of one ChannelMap instance.

    Made by ``channel_map.load_messages(instance)`` (or ``channel_map.load(instance)``);
    pass it in ``*_load_channel_map_instances``.

    Raises:
        InvalidMapKeyError: ``instance`` is not a non-empty string.

    """

    channel_map: ChannelMap[Any]
    instance: str
    kind: Literal["attribute_map", "channel_map"] = field(
        default="channel_map", init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_map_key(self.channel_map.name, self.instance)

    def _map(self) -> Any:
        return self.channel_map


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelLoad:
    """A request to load a Channel's pending messages (``channel.load()``)."""

    name: str


def invocation(ctx: Context, handle: Any, kind: StateKind) -> _Invocation:
    """Return the context's invocation, after checking the handle is declared in its Flow."""
    inv = ctx._inv
    declared = inv.declared.get(handle.name)
    if declared != kind:
        if declared is None:
            raise FlowDefinitionError(
                f"{kind} {handle.name!r} is not declared in the persistence schema of "
                f"Flow {inv.task.flow_type!r}"
            )
        raise FlowDefinitionError(f"{handle.name!r} is declared as a {declared}, not a {kind}")
    return inv
