"""Indexed Attribute values as search rows, and Attribute matches (pure).

An indexed Attribute's committed JSON value becomes zero or more :class:`IndexRow` s (one
per element for KEYWORD_ARRAY); a value that does not fit its index type (a string in an
INT index, say) gives none and is not searchable. The rows are written in the same
transaction as the Attribute, so a search sees exactly the committed state.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from dex_server.engine.query import MAX_KEYWORD_BYTES, SYSTEM_FIELDS, FieldType

__all__ = [
    "INDEX_TYPES",
    "IndexRow",
    "MatchOp",
    "attribute_matches",
    "hydrate",
    "index_rows",
    "check_index_key",
]

INDEX_TYPES: Mapping[str, FieldType] = {t.value: t for t in FieldType} | {"text": FieldType.TEXT}
"""Index type names a spec may carry (``full_text`` and ``text`` are the same)."""

MAX_INDEX_KEY_BYTES = 256
MAX_ARRAY_ELEMENTS = 256


@dataclass(frozen=True)
class IndexRow:
    """One stored search value: ``ord`` orders array elements; one typed column is set."""

    ord: int
    kw: str | None = None
    txt: str | None = None
    i: int | None = None
    num: float | None = None


def check_index_key(key: str) -> str | None:
    """Why ``key`` cannot be an index key, or None when it can."""
    if not key:
        return "an index key must not be empty"
    if "\x00" in key or "`" in key:
        return f"index key {key!r} holds a NUL or a backquote"
    if len(key.encode()) > MAX_INDEX_KEY_BYTES:
        return f"index key {key[:40]!r} is over {MAX_INDEX_KEY_BYTES} bytes"
    if key in SYSTEM_FIELDS:
        return f"index key {key!r} is a system field"
    return None


def index_rows(ftype: FieldType, value: bytes | None) -> list[IndexRow]:
    """The search rows of a committed JSON value (none for a deleted or unfitting one)."""
    if value is None:
        return []
    try:
        v: Any = msgspec.json.decode(value)
    except msgspec.DecodeError:
        return []
    return _rows(ftype, v)


def _rows(ftype: FieldType, v: Any) -> list[IndexRow]:
    if v is None:
        return []
    if ftype is FieldType.KEYWORD:
        ok = isinstance(v, str) and len(v.encode()) <= MAX_KEYWORD_BYTES
        return [IndexRow(0, kw=v)] if ok else []
    if ftype is FieldType.TEXT:
        return [IndexRow(0, txt=v)] if isinstance(v, str) else []
    if ftype is FieldType.KEYWORD_ARRAY:
        if not isinstance(v, list) or len(v) > MAX_ARRAY_ELEMENTS:
            return []
        items = [x for x in v if isinstance(x, str) and len(x.encode()) <= MAX_KEYWORD_BYTES]
        return [IndexRow(n, kw=x) for n, x in enumerate(dict.fromkeys(items))]
    if ftype is FieldType.BOOL:
        return [IndexRow(0, i=int(v))] if isinstance(v, bool) else []
    if ftype is FieldType.INT:
        ok = isinstance(v, int) and not isinstance(v, bool) and -(2**63) <= v < 2**63
        return [IndexRow(0, i=v)] if ok else []
    if ftype is FieldType.DOUBLE:
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
            return [IndexRow(0, num=float(v))]
        return []
    # DATETIME: an ISO 8601 string (naive means UTC) or epoch seconds
    if isinstance(v, str):
        try:
            t = datetime.fromisoformat(v)
        except ValueError:
            return []
        return [IndexRow(0, num=(t if t.tzinfo else t.replace(tzinfo=UTC)).timestamp())]
    if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v):
        return [IndexRow(0, num=float(v))]
    return []


def hydrate(ftype: FieldType, rows: list[IndexRow]) -> Any:
    """The JSON value a search page shows for a field's rows (ordered by ``ord``)."""
    if ftype is FieldType.KEYWORD_ARRAY:
        return [r.kw for r in rows]
    if not rows:
        return None
    r = rows[0]
    if ftype is FieldType.BOOL:
        return bool(r.i)
    if ftype is FieldType.DATETIME:
        assert r.num is not None
        return datetime.fromtimestamp(r.num, tz=UTC).isoformat()
    if ftype is FieldType.INT:
        return r.i
    if ftype is FieldType.DOUBLE:
        return r.num
    return r.kw if ftype is FieldType.KEYWORD else r.txt


class MatchOp(enum.IntEnum):
    """The predicates of ``AttributeMatch`` (numbers as the SDK sends them)."""

    EQUAL = 1
    NOT_EQUAL = 2
    GREATER = 3
    GREATER_OR_EQUAL = 4
    LESS = 5
    LESS_OR_EQUAL = 6


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def check_match(op: MatchOp, operand: Any) -> str | None:
    """Why ``operand`` cannot be matched with ``op``, or None when it can.

    Equality takes a JSON scalar or null; ordering takes numbers only (strings and bools
    compare for equality only).
    """
    if op in (MatchOp.EQUAL, MatchOp.NOT_EQUAL):
        if operand is None or isinstance(operand, str | bool) or _number(operand):
            return None
        return "an Attribute match compares scalars (string, number, bool or null)"
    if not _number(operand):
        return f"{op.name} compares numbers only (strings and bools take EQUAL / NOT_EQUAL)"
    return None


def attribute_matches(op: MatchOp, operand: Any, value: Any) -> bool:
    """Whether a committed value (None when absent) satisfies ``op operand``."""
    if op is MatchOp.EQUAL:
        return _same(value, operand)
    if op is MatchOp.NOT_EQUAL:
        return not _same(value, operand)
    if not _number(value):
        return False
    if op is MatchOp.GREATER:
        return bool(value > operand)
    if op is MatchOp.GREATER_OR_EQUAL:
        return bool(value >= operand)
    if op is MatchOp.LESS:
        return bool(value < operand)
    return bool(value <= operand)


def _same(a: Any, b: Any) -> bool:
    # JSON 1 and true differ; 1 and 1.0 are the same number
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)
