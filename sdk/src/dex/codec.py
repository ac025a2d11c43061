"""The codec API: ``Codec``, ``Value``, ``WireKind``, ``JsonCodec``, ``CodecRegistry``, scalars."""

from __future__ import annotations

from dex._codec import (
    BOOL,
    BYTES,
    DOUBLE,
    INT64,
    STRING,
    Codec,
    CodecRegistry,
    JsonCodec,
    Value,
    WireKind,
)

__all__ = [
    "BOOL",
    "BYTES",
    "DOUBLE",
    "INT64",
    "STRING",
    "Codec",
    "CodecRegistry",
    "JsonCodec",
    "Value",
    "WireKind",
]
