"""Attributes and AttributeMaps, their locks, load requests and indexes."""

from __future__ import annotations

from dex import (
    Attribute,
    AttributeIndex,
    AttributeLock,
    AttributeMap,
    AttributeMapLoad,
    Context,
    IndexType,
    ValueMappingError,
)

__all__ = [
    "Attribute",
    "AttributeIndex",
    "AttributeLock",
    "AttributeMap",
    "AttributeMapLoad",
    "Context",
    "IndexType",
    "ValueMappingError",
]
