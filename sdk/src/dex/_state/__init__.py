"""State handles: Attribute, AttributeMap, Channel, ChannelMap, Stream, and their schema."""

from dex._state._common import (
    AttributeLock,
    AttributeMapLoad,
    ChannelLoad,
    ChannelMapLoad,
    InstanceLoad,
    LockKey,
)
from dex._state._durable import AttributeIndex, IndexType
from dex._state.attribute import Attribute
from dex._state.attribute_map import AttributeMap
from dex._state.channel import Channel, ChannelMessage
from dex._state.channel_map import ChannelMap
from dex._state.schema import PersistenceSchema, StateDeclaration
from dex._state.stream import AsyncBufferedTextStream, BufferedText, BufferedTextStream, Stream

__all__ = [
    "AsyncBufferedTextStream",
    "Attribute",
    "AttributeIndex",
    "AttributeLock",
    "AttributeMap",
    "AttributeMapLoad",
    "BufferedText",
    "BufferedTextStream",
    "Channel",
    "ChannelLoad",
    "ChannelMap",
    "ChannelMapLoad",
    "ChannelMessage",
    "IndexType",
    "InstanceLoad",
    "LockKey",
    "PersistenceSchema",
    "StateDeclaration",
    "Stream",
]
