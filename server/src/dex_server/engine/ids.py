"""Identifier formats: UUIDv7 run and message ids, ``<StepType>-<n>`` execution ids."""

from __future__ import annotations

import os
import re
import threading
import time

_UUID7 = re.compile(r"[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}")
_lock = threading.Lock()
_last_ms = 0
_seq = 0


def new_uuid7(now_ms: int | None = None) -> str:
    """Return a UUIDv7 as 32 hex digits, strictly increasing within this process.

    Ids made in the same millisecond use a 12-bit counter so they still sort in creation
    order (run ids double as the newest-first ordering key of the Flow list).
    """
    global _last_ms, _seq
    with _lock:
        ms = int(time.time() * 1000) if now_ms is None else now_ms
        if ms <= _last_ms:
            ms = _last_ms
            _seq += 1
            if _seq > 0xFFF:
                ms += 1
                _seq = 0
        else:
            _seq = 0
        _last_ms = ms
        seq = _seq
    rand = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (ms << 80) | (0x7 << 76) | (seq << 64) | (0b10 << 62) | rand
    return f"{value:032x}"


def is_uuid7(value: str) -> bool:
    """Whether ``value`` has the form :func:`new_uuid7` returns (a run id, for instance)."""
    return _UUID7.fullmatch(value) is not None


def format_execution_id(step_type: str, n: int) -> str:
    """Return the execution id of the ``n``-th execution (1-based) of ``step_type``."""
    return f"{step_type}-{n}"
