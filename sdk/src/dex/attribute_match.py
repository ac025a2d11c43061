"""``AttributeMatch``: a condition on an Attribute's value."""

from __future__ import annotations

from dex import (
    AttributeMatch,
    Codec,
)

__all__ = [
    "AttributeMatch",
    "Codec",
]
