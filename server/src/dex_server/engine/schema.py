"""Checks of Flow specs and of the state names a start or a result writes.

A spec reaches the server two ways, with a start over HTTP and with a Worker's
registration; both are checked by :func:`check_spec`, so a spec one path refuses the other
refuses too. State names are physical: an Attribute or Channel is its declared name, an
instance of an AttributeMap or ChannelMap is ``"<map>/<key>"`` (the SDK URL-quotes the key,
so the first ``/`` separates them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from dex._protocol import FlowSpec

from dex_server.engine.query import FieldType
from dex_server.engine.search import INDEX_TYPES, check_index_key


class InvalidSpecError(Exception):
    """A Flow spec is not one the server can run (BAD_REQUEST at the edge)."""


class UndeclaredStateError(Exception):
    """A start or a result names state its Flow type's persistence schema does not declare."""


def check_spec(spec: FlowSpec) -> None:
    """Refuse a spec whose names do not hold together.

    Raises:
        InvalidSpecError: an empty or repeated Step type, RPC or state name, a name with
            a NUL character (PostgreSQL cannot store it), a state name with ``/``, or a
            start Step that is not one of the spec's Steps.

    """
    what = f"the spec of Flow type {spec.flow_type!r}"
    if not spec.flow_type:
        raise InvalidSpecError("a spec needs a non-empty flow_type")
    if "\x00" in spec.flow_type:
        raise InvalidSpecError(f"{what}: the Flow type holds a NUL character")
    _unique((s.step_type for s in spec.steps), f"Step type in {what}")
    _unique((r.name for r in spec.rpcs), f"RPC in {what}")
    _unique((d.name for d in spec.state), f"state name in {what}")
    for d in spec.state:
        if "/" in d.name:
            raise InvalidSpecError(f"state name {d.name!r} in {what} holds a '/'")
    if spec.start_step is not None and spec.start_step not in {s.step_type for s in spec.steps}:
        raise InvalidSpecError(f"start Step {spec.start_step!r} is not a Step of the Flow")
    _check_indexes(spec, what)


def _check_indexes(spec: FlowSpec, what: str) -> None:
    keys: dict[str, str] = {}
    for d in spec.state:
        if d.index_type is None:
            if d.index_key:
                raise InvalidSpecError(f"state {d.name!r} in {what} has an index_key but no index")
            continue
        if d.kind not in ("attribute", "attribute_map"):
            raise InvalidSpecError(f"{d.kind} {d.name!r} in {what} cannot have a search index")
        if d.index_type not in INDEX_TYPES:
            kinds = ", ".join(t.value for t in FieldType)
            raise InvalidSpecError(
                f"Attribute {d.name!r} in {what}: unknown index type {d.index_type!r} ({kinds})"
            )
        if d.kind == "attribute_map" and not d.index_key:
            raise InvalidSpecError(
                f"AttributeMap {d.name!r} in {what}: an indexed map needs an explicit index_key"
            )
        key = d.index_key or d.name
        problem = check_index_key(key)
        if problem is not None:
            raise InvalidSpecError(f"Attribute {d.name!r} in {what}: {problem}")
        if key in keys:
            raise InvalidSpecError(
                f"index key {key!r} in {what} is used by both {keys[key]!r} and {d.name!r}"
            )
        keys[key] = d.name


def index_fields(spec: FlowSpec) -> dict[str, tuple[str, FieldType]]:
    """The indexed state of a (checked) spec: declared name -> (index key, type)."""
    return {
        d.name: (d.index_key or d.name, INDEX_TYPES[d.index_type])
        for d in spec.state
        if d.index_type is not None and d.index_type in INDEX_TYPES
    }


def _unique(names: Iterable[str], what: str) -> None:
    seen: set[str] = set()
    for name in names:
        if not name:
            raise InvalidSpecError(f"an empty {what}")
        if "\x00" in name:
            raise InvalidSpecError(f"{what} {name!r} holds a NUL character")
        if name in seen:
            raise InvalidSpecError(f"{what} {name!r} appears twice")
        seen.add(name)


@dataclass(frozen=True)
class StateNames:
    """The declared state names of one spec, by kind."""

    attributes: frozenset[str]
    attribute_maps: frozenset[str]
    channels: frozenset[str]
    channel_maps: frozenset[str]

    @staticmethod
    def of(spec: FlowSpec) -> StateNames:
        def kind(k: str) -> frozenset[str]:
            return frozenset(d.name for d in spec.state if d.kind == k)

        return StateNames(
            kind("attribute"), kind("attribute_map"), kind("channel"), kind("channel_map")
        )


def _declared(name: str, singles: frozenset[str], maps: frozenset[str]) -> bool:
    if name in singles:
        return True
    head, sep, key = name.partition("/")
    return bool(sep) and bool(key) and head in maps


def check_attribute_names(names: StateNames, attributes: Iterable[str], what: str) -> None:
    """Refuse Attribute names that are not a declared Attribute or an AttributeMap instance.

    Raises:
        UndeclaredStateError: an empty name, or one the schema does not declare.

    """
    for name in attributes:
        if not name:
            raise UndeclaredStateError(
                f"{what} writes an Attribute with an empty name (no persistence schema"
                " declares one)"
            )
        if not _declared(name, names.attributes, names.attribute_maps):
            raise UndeclaredStateError(
                f"{what} writes Attribute {name!r}, which the Flow's persistence schema"
                " does not declare (as an Attribute or an AttributeMap instance)"
            )


def check_channel_names(names: StateNames, channels: Iterable[str], what: str) -> None:
    """Refuse Channel names that are not a declared Channel or a ChannelMap instance.

    Raises:
        UndeclaredStateError: an empty name, or one the schema does not declare.

    """
    for name in channels:
        if not name:
            raise UndeclaredStateError(
                f"{what} uses a Channel with an empty name (no persistence schema declares one)"
            )
        if not _declared(name, names.channels, names.channel_maps):
            raise UndeclaredStateError(
                f"{what} uses Channel {name!r}, which the Flow's persistence schema"
                " does not declare (as a Channel or a ChannelMap instance)"
            )
