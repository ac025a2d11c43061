from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from dex import BlobCacheConfig, open_blob_cache
from dex._blob_cache import blob_hash


def _blob(i: int, size: int = 1000) -> tuple[str, bytes]:
    data = (f"{i:08d}".encode() * (size // 8 + 1))[:size]
    return blob_hash(data), data


def test_put_get_roundtrip_and_miss(tmp_path: Path) -> None:
    cache = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20))
    h, data = _blob(1)
    assert cache.get(h) is None
    cache.put(h, data)
    assert cache.get(h) == data
    assert (tmp_path / h).read_bytes() == data
    assert h in cache
    assert cache.get("not-a-hash") is None
    assert cache.get("../" + h[3:]) is None


def test_put_rejects_wrong_hash(tmp_path: Path) -> None:
    cache = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20))
    h, _ = _blob(1)
    with pytest.raises(ValueError, match="mismatch"):
        cache.put(h, b"other bytes")
    assert cache.get(h) is None


def test_persists_across_reopen(tmp_path: Path) -> None:
    config = BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20)
    first = open_blob_cache(config)
    stored = [_blob(i) for i in range(5)]
    for h, data in stored:
        first.put(h, data)
    second = open_blob_cache(config)
    assert second.size_bytes == sum(len(d) for _, d in stored)
    for h, data in stored:
        assert second.get(h) == data


def test_evicts_least_recently_used_beyond_max_bytes(tmp_path: Path) -> None:
    cache = open_blob_cache(
        BlobCacheConfig(directory=tmp_path, max_bytes=10_000, frequency_counters=0)
    )
    blobs = [_blob(i, 1000) for i in range(10)]
    base = time.time() - 1000
    for n, (h, data) in enumerate(blobs):
        cache.put(h, data)
        os.utime(tmp_path / h, (base + n, base + n))  # distinct, ordered last-use times
    assert cache.size_bytes == 10_000
    cache.get(blobs[0][0])  # blob 0 becomes the most recently used
    h, data = _blob(99, 1000)
    cache.put(h, data)
    assert cache.size_bytes <= 10_000
    on_disk = {p.name for p in tmp_path.iterdir()}
    assert blobs[0][0] in on_disk and h in on_disk
    assert blobs[1][0] not in on_disk  # the oldest untouched blob went first
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 10_000


def test_blob_larger_than_cache_is_not_stored(tmp_path: Path) -> None:
    cache = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=100))
    h, data = _blob(1, 1000)
    cache.put(h, data)
    assert cache.get(h) is None
    assert list(tmp_path.iterdir()) == []


def test_reopen_over_budget_evicts(tmp_path: Path) -> None:
    big = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20))
    for i in range(8):
        big.put(*_blob(i, 1000))
    small = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=4000))
    assert small.size_bytes <= 4000
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 4000


def test_corrupt_file_is_detected_and_dropped(tmp_path: Path) -> None:
    config = BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20, frequency_counters=0)
    cache = open_blob_cache(config)
    h, data = _blob(7)
    cache.put(h, data)
    (tmp_path / h).write_bytes(b"garbage" + data[7:])
    assert cache.get(h) is None
    assert not (tmp_path / h).exists()
    cache.put(h, data)  # and it can be stored again
    assert cache.get(h) == data


def test_memory_front_serves_hot_entries(tmp_path: Path) -> None:
    cache = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20))
    h, data = _blob(3)
    cache.put(h, data)
    (tmp_path / h).unlink()  # the in-memory front still has it
    assert cache.get(h) == data


def test_two_processes_share_a_directory(tmp_path: Path) -> None:
    # Two independent instances stand in for two processes: they only share files.
    a = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20))
    b = open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20))
    h, data = _blob(5)
    a.put(h, data)
    assert b.get(h) == data
    b.put(h, data)  # idempotent from the other side
    assert a.get(h) == data
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_stale_temporaries_are_removed_on_open(tmp_path: Path) -> None:
    stale = tmp_path / ".tmp-123-456-abc"
    stale.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = tmp_path / ".tmp-123-789-def"
    fresh.write_bytes(b"in progress")
    open_blob_cache(BlobCacheConfig(directory=tmp_path, max_bytes=1 << 20))
    assert not stale.exists()
    assert fresh.exists()


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        BlobCacheConfig(directory=tmp_path, max_bytes=0)
    with pytest.raises(ValueError):
        BlobCacheConfig(directory=tmp_path, max_bytes=10, frequency_counters=-1)
