"""Channels and ChannelMaps, their messages and load requests."""

from __future__ import annotations

from dex import (
    Channel,
    ChannelMap,
    ChannelMapLoad,
    ChannelMessage,
    Context,
)

__all__ = [
    "Channel",
    "ChannelMap",
    "ChannelMapLoad",
    "ChannelMessage",
    "Context",
]
