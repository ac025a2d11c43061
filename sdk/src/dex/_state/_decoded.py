"""Worker-wide cache of decoded values, keyed by the value type and the bytes' sha256.

Values read on demand (``AttributeMap.load_range`` / ``load_keys``) are often immutable
records read again and again (a conversation history, say). Decoding them once per
process is enough when their type is immutable: frozen msgspec Structs, frozen
dataclasses, and scalars. Other types are decoded on every read, because a shared mutable
object could be changed by one handler under another.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import msgspec

from dex._codec import WireCodec as Codec

_MAX_ENTRIES = 16384
_MAX_BYTES = 64 * 1024 * 1024
_SCALARS = (str, int, float, bool, bytes)


def _shareable(tp: Any) -> bool:
    if tp in _SCALARS:
        return True
    if not isinstance(tp, type):
        return False
    if issubclass(tp, msgspec.Struct):
        return bool(tp.__struct_config__.frozen)
    if dataclasses.is_dataclass(tp):
        params = getattr(tp, "__dataclass_params__", None)
        return bool(params is not None and params.frozen)
    return False


class DecodedCache:
    """A bounded LRU of decoded values; safe to use from several threads."""

    def __init__(self, max_entries: int = _MAX_ENTRIES, max_bytes: int = _MAX_BYTES) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._items: OrderedDict[tuple[Any, bytes], tuple[object, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._shareable: dict[Any, bool] = {}
        self.hits = 0
        self.misses = 0

    def decode(self, value_type: Any, codec: Callable[[object], Codec], data: bytes) -> Any:
        """Return ``data`` decoded as ``value_type``, from the cache when possible."""
        try:
            shared = self._shareable.get(value_type)
            if shared is None:
                shared = self._shareable[value_type] = _shareable(value_type)
        except TypeError:  # an unhashable type annotation: never cached
            shared = False
        if not shared or len(data) > self._max_bytes // 16:
            return codec(value_type).decode(data)
        key = (value_type, hashlib.sha256(data).digest())
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                self.hits += 1
                return hit[0]
        value = codec(value_type).decode(data)
        with self._lock:
            self.misses += 1
            if key not in self._items:
                self._items[key] = (value, len(data))
                self._bytes += len(data)
                while len(self._items) > self._max_entries or self._bytes > self._max_bytes:
                    _, (_, size) = self._items.popitem(last=False)
                    self._bytes -= size
        return value

    def clear(self) -> None:
        """Drop every entry (tests use it to start cold)."""
        with self._lock:
            self._items.clear()
            self._bytes = 0


DECODED_CACHE = DecodedCache()
