"""Options of one RPC invocation: ``RPCInvokeOptions``."""

from __future__ import annotations

from dex import (
    AttributeLock,
    AttributeMapLoad,
    ChannelMapLoad,
    RPCInvokeOptions,
)

__all__ = [
    "AttributeLock",
    "AttributeMapLoad",
    "ChannelMapLoad",
    "RPCInvokeOptions",
]
