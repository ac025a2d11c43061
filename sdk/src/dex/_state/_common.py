"""Shared pieces of the state handles: physical names, lock keys, load selections."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import quote, unquote

from dex.errors import FlowDefinitionError, InvalidMapKeyError

if TYPE_CHECKING:
    from dex._context import Context, _Invocation

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
    return f"{name}/{quote(check_map_key(name, key), safe='')}"


def instance_key(physical: str) -> str:
    """Return the key of a physical map-instance name."""
    return unquote(physical.split("/", 1)[1])


@dataclass(frozen=True, kw_only=True, slots=True)
class LockKey:
    """A lock on an Attribute or on one AttributeMap instance (``attr.lock()``, ``amap.lock(k)``).

    Pass it in ``StepOptions(*_lock_attributes=...)`` or ``@rpc(lock_attributes=...)``.
    """

    name: str  # declared name
    kind: Literal["attribute", "attribute_map"]
    physical: str


@dataclass(frozen=True, kw_only=True, slots=True)
class InstanceLoad:
    """A request to load one map instance (``amap.load(key)`` or ``channel_map.load(key)``)."""

    name: str  # declared map name
    kind: Literal["attribute_map", "channel_map"]
    key: str
    physical: str


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
