"""State handles: Attribute, AttributeMap, Channel, ChannelMap, Stream."""

from dex._state._common import ChannelLoad, InstanceLoad, LockKey
from dex._state.attribute import Attribute
from dex._state.attribute_map import AttributeMap
from dex._state.channel import Channel, ChannelMessage
from dex._state.channel_map import ChannelMap
from dex._state.stream import BufferedText, Stream

__all__ = [
    "Attribute",
    "AttributeMap",
    "BufferedText",
    "Channel",
    "ChannelLoad",
    "ChannelMap",
    "ChannelMessage",
    "InstanceLoad",
    "LockKey",
    "Stream",
]
