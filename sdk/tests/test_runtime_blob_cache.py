from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest
from dex import BlobCache, BlobCacheConfig, open_blob_cache
from dex._blob_cache import DiskBlobCache, blob_hash

from tests.support.blob_caches import DictBlobCache


def _open(path: Path, max_bytes: int = 1 << 20, counters: int = 10_000) -> DiskBlobCache:
    cache = open_blob_cache(BlobCacheConfig(path, max_bytes, counters))
    assert isinstance(cache, DiskBlobCache)
    return cache


def _blob(i: int, size: int = 1000) -> tuple[str, bytes]:
    data = (f"{i:08d}".encode() * (size // 8 + 1))[:size]
    return blob_hash(data), data


def _file(root: Path, blob_id: str) -> Path:
    return root / "blobs" / hashlib.sha256(blob_id.encode()).hexdigest()


def _files(root: Path) -> list[Path]:
    return sorted((root / "blobs").iterdir())


def test_seed_sample_opens_a_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cache = open_blob_cache(BlobCacheConfig(".dex-cache", 64 * 1024 * 1024))
    assert cache.config == BlobCacheConfig(".dex-cache", 64 * 1024 * 1024, 10_000)
    assert isinstance(cache, BlobCache)
    assert cache.put("blob-1", b"x") is True
    assert (tmp_path / ".dex-cache" / "blobs").is_dir()


def test_put_get_roundtrip_with_opaque_ids(tmp_path: Path) -> None:
    cache = _open(tmp_path)
    for blob_id in ("blob-1", "flow-7/ref:abc", "../../etc/passwd", "é" * 500):
        assert cache.get(blob_id) is None
        assert cache.put(blob_id, blob_id.encode() * 3) is True
        assert cache.get(blob_id=blob_id) == blob_id.encode() * 3
        assert blob_id in cache
    assert cache.put("empty", b"") is True
    assert cache.get("empty") == b""
    # file names never come from the id itself
    assert all(len(p.name) == 64 for p in _files(tmp_path))
    assert not (tmp_path.parent / "etc").exists()


def test_put_keywords_and_idempotence(tmp_path: Path) -> None:
    cache = _open(tmp_path)
    assert cache.put(blob_id="a", payload=b"one") is True
    assert cache.put("a", b"one") is True
    with pytest.raises(ValueError, match="other content"):
        cache.put("a", b"two")
    assert cache.get("a") == b"one"
    with pytest.raises(ValueError, match="empty"):
        cache.put("", b"x")
    with pytest.raises(TypeError):
        cache.put(5, b"x")  # type: ignore[arg-type]


def test_delete_and_delete_all(tmp_path: Path) -> None:
    cache = _open(tmp_path)
    cache.put("a", b"1")
    cache.put("b", b"2")
    cache.delete("a")
    cache.delete("never-stored")
    assert cache.get("a") is None
    assert cache.get("b") == b"2"
    assert cache.put("a", b"other") is True  # a deleted id may be stored anew
    cache.delete_all()
    assert cache.get("a") is None and cache.get("b") is None
    assert _files(tmp_path) == []
    assert cache.size_bytes == 0


def test_close(tmp_path: Path) -> None:
    cache = _open(tmp_path)
    cache.put("k", b"v")
    cache.close()
    for call in (
        lambda: cache.get("k"),
        lambda: cache.put("k2", b"v"),
        lambda: cache.delete("k"),
        cache.delete_all,
    ):
        with pytest.raises(RuntimeError, match="closed"):
            call()
    cache.close()  # idempotent
    assert _open(tmp_path).get("k") == b"v"  # the files stay


def test_persists_across_reopen(tmp_path: Path) -> None:
    first = _open(tmp_path)
    stored = [_blob(i) for i in range(5)]
    for h, data in stored:
        first.put(h, data)
    second = _open(tmp_path)
    assert second.size_bytes == sum(len(d) + 32 for _, d in stored)
    for h, data in stored:
        assert second.get(h) == data


def test_evicts_least_recently_used_beyond_max_bytes(tmp_path: Path) -> None:
    cache = _open(tmp_path, max_bytes=10_320)
    blobs = [_blob(i, 1000) for i in range(10)]
    base = time.time() - 1000
    for n, (h, data) in enumerate(blobs):
        cache.put(h, data)
        os.utime(_file(tmp_path, h), (base + n, base + n))  # ordered last-use times
    assert cache.size_bytes == 10_320
    assert cache.get(blobs[0][0]) == blobs[0][1]  # blob 0 becomes the most recently used
    h, data = _blob(99, 1000)
    assert cache.put(h, data) is True
    assert cache.size_bytes <= 10_320
    on_disk = {p.name for p in _files(tmp_path)}
    assert _file(tmp_path, blobs[0][0]).name in on_disk
    assert _file(tmp_path, h).name in on_disk
    assert _file(tmp_path, blobs[1][0]).name not in on_disk  # the oldest untouched went first
    assert sum(p.stat().st_size for p in _files(tmp_path)) <= 10_320


def test_blob_larger_than_cache_is_not_stored(tmp_path: Path) -> None:
    cache = _open(tmp_path, max_bytes=100)
    h, data = _blob(1, 1000)
    assert cache.put(h, data) is False
    assert cache.get(h) is None
    assert _files(tmp_path) == []


def test_reopen_over_budget_evicts(tmp_path: Path) -> None:
    big = _open(tmp_path)
    for i in range(8):
        big.put(*_blob(i, 1000))
    small = _open(tmp_path, max_bytes=4000)
    assert small.size_bytes <= 4000
    assert sum(p.stat().st_size for p in _files(tmp_path)) <= 4000


def test_corrupt_file_is_detected_and_dropped(tmp_path: Path) -> None:
    writer = _open(tmp_path)
    writer.put("c", b"payload bytes")
    path = _file(tmp_path, "c")
    path.write_bytes(path.read_bytes()[:-3] + b"xyz")
    reader = _open(tmp_path)  # a fresh process: nothing in memory
    assert reader.get("c") is None
    assert not path.exists()
    assert reader.put("c", b"payload bytes") is True  # and it can be stored again
    assert reader.get("c") == b"payload bytes"


def test_memory_front_serves_hot_entries(tmp_path: Path) -> None:
    cache = _open(tmp_path)
    cache.put("hot", b"data")
    _file(tmp_path, "hot").unlink()  # the in-memory front still has it
    assert cache.get("hot") == b"data"


def test_two_processes_share_a_directory(tmp_path: Path) -> None:
    # Two independent instances stand in for two processes: they only share files.
    a = _open(tmp_path)
    b = _open(tmp_path)
    h, data = _blob(5)
    assert a.put(h, data) is True
    assert b.get(h) == data
    assert b.put(h, data) is True  # idempotent from the other side
    assert a.get(h) == data
    assert list((tmp_path / "tmp").iterdir()) == []


def test_stale_files_are_removed_on_open(tmp_path: Path) -> None:
    _open(tmp_path).close()
    stale = tmp_path / "tmp" / "123-456-abc"
    stale.write_bytes(b"partial")
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = tmp_path / "tmp" / "123-789-def"
    fresh.write_bytes(b"in progress")
    legacy = tmp_path / blob_hash(b"old layout")  # a file of the earlier flat layout
    legacy.write_bytes(b"old layout")
    _open(tmp_path)
    assert not stale.exists()
    assert fresh.exists()
    assert not legacy.exists()


def test_config_positional_and_validation(tmp_path: Path) -> None:
    config = BlobCacheConfig(str(tmp_path), 64)
    assert (config.directory, config.max_bytes, config.frequency_counters) == (
        str(tmp_path),
        64,
        10_000,
    )
    assert BlobCacheConfig(tmp_path, 64, 0).frequency_counters == 10_000  # 0 → default
    with pytest.raises(ValueError, match="max_bytes"):
        BlobCacheConfig(tmp_path, 0)
    with pytest.raises(ValueError, match="frequency_counters"):
        BlobCacheConfig(tmp_path, 10, -1)
    with pytest.raises(ValueError, match="directory"):
        BlobCacheConfig("", 10)


def test_user_implementation_satisfies_the_protocol() -> None:
    cache: BlobCache = DictBlobCache()
    assert isinstance(cache, BlobCache)
