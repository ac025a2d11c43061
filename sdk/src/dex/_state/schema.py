"""PersistenceSchema: every piece of durable state a Flow declares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dex._state._durable import unavailable_feature
from dex._state.attribute import Attribute
from dex._state.attribute_map import AttributeMap
from dex._state.channel import Channel
from dex._state.channel_map import ChannelMap
from dex._state.stream import Stream
from dex.errors import FeatureNotAvailableError, FlowDefinitionError

StateDeclaration = Attribute[Any] | AttributeMap[Any] | Channel[Any] | ChannelMap[Any] | Stream[Any]
_DECLARATIONS = (Attribute, AttributeMap, Channel, ChannelMap, Stream)


@dataclass(frozen=True, slots=True)
class PersistenceSchema:
    """Every Attribute, AttributeMap, Channel, ChannelMap and Stream a Flow uses.

    Build it with ``PersistenceSchema.of(*declarations)`` (any order, any mix) or with
    the three groups: ``PersistenceSchema(attributes=(...), channels=(...),
    streams=(...))``. Names are unique across all kinds, non-empty and without ``/``;
    handlers that touch an undeclared name fail. ``declarations`` lists all of them.

    Args:
        attributes: Attributes and AttributeMaps. Default none.
        channels: Channels and ChannelMaps. Default none.
        streams: Streams. Default none.

    Raises:
        FlowDefinitionError: a declaration in the wrong group, a non-declaration, or a
            name declared twice.
        FeatureNotAvailableError: an Attribute asks for Attribute Store sync or hard
            delete, which this release does not run yet.

    """

    attributes: tuple[Attribute[Any] | AttributeMap[Any], ...] = ()
    channels: tuple[Channel[Any] | ChannelMap[Any], ...] = ()
    streams: tuple[Stream[Any], ...] = ()

    def __post_init__(self) -> None:
        groups: tuple[tuple[str, tuple[type, ...]], ...] = (
            ("attributes", (Attribute, AttributeMap)),
            ("channels", (Channel, ChannelMap)),
            ("streams", (Stream,)),
        )
        seen: set[str] = set()
        for field_name, kinds in groups:
            value = getattr(self, field_name)
            if isinstance(value, str | bytes) or not isinstance(value, Iterable):
                raise FlowDefinitionError(f"PersistenceSchema {field_name} must be a tuple")
            items = tuple(value)
            object.__setattr__(self, field_name, items)
            for d in items:
                if not isinstance(d, _DECLARATIONS) or not isinstance(d, kinds):
                    raise FlowDefinitionError(
                        f"PersistenceSchema {field_name} cannot hold {d!r}: expected "
                        + " or ".join(k.__name__ for k in kinds)
                    )
                if d.name in seen:
                    raise FlowDefinitionError(f"state name {d.name!r} is declared twice")
                seen.add(d.name)
                feature = unavailable_feature(d)
                if feature is not None:
                    raise FeatureNotAvailableError(feature)

    @property
    def declarations(self) -> tuple[StateDeclaration, ...]:
        """Every declaration: the attributes, then the channels, then the streams."""
        return (*self.attributes, *self.channels, *self.streams)

    @staticmethod
    def of(*definitions: StateDeclaration | Iterable[StateDeclaration]) -> PersistenceSchema:
        """Build a schema from declarations of any kind, in any order.

        An iterable of declarations is flattened, so ``of(*common, extra)`` and
        ``of(common, extra)`` are the same.

        Raises:
            FlowDefinitionError: a non-declaration, or a name declared twice.
            FeatureNotAvailableError: as for the constructor.

        """
        flat: list[StateDeclaration] = []
        for d in definitions:
            if isinstance(d, _DECLARATIONS):
                flat.append(d)
            elif isinstance(d, Iterable) and not isinstance(d, str | bytes):
                for inner in d:
                    if not isinstance(inner, _DECLARATIONS):
                        raise FlowDefinitionError(f"not a state declaration: {inner!r}")
                    flat.append(inner)
            else:
                raise FlowDefinitionError(f"not a state declaration: {d!r}")
        return PersistenceSchema(
            attributes=tuple(d for d in flat if isinstance(d, Attribute | AttributeMap)),
            channels=tuple(d for d in flat if isinstance(d, Channel | ChannelMap)),
            streams=tuple(d for d in flat if isinstance(d, Stream)),
        )
