"""A bounded, persistent, content-addressed cache of blobs, shared by Clients and Workers.

Large values travel as blob references (sha256 of the bytes). A Worker resolves them through
``GET /v1/blobs/{hash}`` once and keeps the bytes here, so later tasks that carry the same
reference (a long agent history, say) cost a local read instead of a download.

Layout: one file per blob named by its hex sha256 inside ``directory``. Writers create a
private temporary file and ``os.replace`` it into place, so several processes can share the
directory: a reader sees a whole file or none. Every read verifies the hash; a corrupt file
is deleted and reported as a miss. A file's modification time is its last use (touched on
read), which orders eviction across processes and restarts.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

_HASH_RE = re.compile(r"[0-9a-f]{64}")
_TMP_PREFIX = ".tmp-"
# After an eviction the cache holds at most this share of max_bytes, so evictions (each
# rescans the directory to see other processes' files) stay rare.
_EVICT_TO = 0.9
_MEMORY_FRONT_SHARE = 8  # the in-memory front holds at most max_bytes / 8 ...
_MEMORY_FRONT_CAP = 64 * 1024 * 1024  # ... and never more than 64 MiB


@dataclass(frozen=True, kw_only=True)
class BlobCacheConfig:
    """Where and how big the blob cache is.

    Attributes:
        directory: folder of the cache files; created if missing. Several processes may
            share it.
        max_bytes: bound of the bytes kept on disk; least recently used blobs are evicted
            beyond it. A blob larger than this is never cached.
        frequency_counters: how many recently used blob hashes the in-memory front tracks
            (default 10,000). Hot blobs are served from memory without touching the disk.

    """

    directory: str | os.PathLike[str]
    max_bytes: int
    frequency_counters: int = 10_000

    def __post_init__(self) -> None:
        if self.max_bytes <= 0:
            raise ValueError("BlobCacheConfig.max_bytes must be positive")
        if self.frequency_counters < 0:
            raise ValueError("BlobCacheConfig.frequency_counters must be >= 0")


def blob_hash(data: bytes) -> str:
    """Return the reference of ``data``: its lowercase hex sha256."""
    return hashlib.sha256(data).hexdigest()


class BlobCache:
    """A persistent blob cache; build it with ``open_blob_cache``.

    All methods are thread-safe. They do small blocking file I/O; callers on an event loop
    accept that (reads are local and usually served from the in-memory front).
    """

    def __init__(self, config: BlobCacheConfig) -> None:
        self.config = config
        self._dir = Path(config.directory)
        self._dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        # Disk index of this process's view: hash -> size, in LRU order (oldest first).
        self._disk: OrderedDict[str, int] = OrderedDict()
        self._disk_bytes = 0
        self._mem: OrderedDict[str, bytes] = OrderedDict()
        self._mem_bytes = 0
        self._mem_max_bytes = min(config.max_bytes // _MEMORY_FRONT_SHARE, _MEMORY_FRONT_CAP)
        self._rescan()
        if self._disk_bytes > config.max_bytes:
            with self._lock:
                self._evict_locked(protect=None)

    # ------------------------------------------------------------------ public API

    @property
    def directory(self) -> Path:
        """The cache directory."""
        return self._dir

    @property
    def size_bytes(self) -> int:
        """Bytes on disk as this process last saw them."""
        return self._disk_bytes

    def get(self, hash: str) -> bytes | None:
        """Return blob ``hash``, or None when absent (or found corrupt and dropped)."""
        if not _HASH_RE.fullmatch(hash):
            return None
        with self._lock:
            data = self._mem.get(hash)
            if data is not None:
                self._mem.move_to_end(hash)
                if hash in self._disk:
                    self._disk.move_to_end(hash)
                return data
        path = self._dir / hash
        try:
            data = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            with self._lock:
                self._forget_disk_locked(hash)
            return None
        if blob_hash(data) != hash:
            self._drop_corrupt(path, hash)
            return None
        try:
            os.utime(path)  # last use, for eviction order seen by every process
        except FileNotFoundError:
            pass
        with self._lock:
            if hash in self._disk:
                self._disk.move_to_end(hash)
            else:
                self._disk[hash] = len(data)
                self._disk_bytes += len(data)
            self._remember_locked(hash, data)
        return data

    def put(self, hash: str, data: bytes) -> None:
        """Store ``data`` under ``hash`` (idempotent); evict old blobs beyond ``max_bytes``.

        Raises:
            ValueError: ``hash`` is not the sha256 of ``data``.

        """
        if blob_hash(data) != hash:
            raise ValueError(f"blob hash mismatch: data does not hash to {hash}")
        if len(data) > self.config.max_bytes:
            return
        path = self._dir / hash
        with self._lock:
            known = hash in self._disk
        if not known or not path.exists():
            tmp = self._dir / f"{_TMP_PREFIX}{os.getpid()}-{threading.get_ident()}-{hash[:16]}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        with self._lock:
            if hash in self._disk:
                self._disk.move_to_end(hash)
            else:
                self._disk[hash] = len(data)
                self._disk_bytes += len(data)
            self._remember_locked(hash, data)
            if self._disk_bytes > self.config.max_bytes:
                self._evict_locked(protect=hash)

    def __contains__(self, hash: object) -> bool:
        return isinstance(hash, str) and self.get(hash) is not None

    def clear(self) -> None:
        """Delete every cached blob (files of other processes included)."""
        with self._lock:
            for entry in self._dir.iterdir():
                if _HASH_RE.fullmatch(entry.name) or entry.name.startswith(_TMP_PREFIX):
                    entry.unlink(missing_ok=True)
            self._disk.clear()
            self._disk_bytes = 0
            self._mem.clear()
            self._mem_bytes = 0

    # ------------------------------------------------------------------ internals

    def _rescan(self) -> None:
        """Rebuild the disk index from the directory (ordered by last use)."""
        entries: list[tuple[float, str, int]] = []
        for entry in os.scandir(self._dir):
            if not _HASH_RE.fullmatch(entry.name):
                continue
            try:
                st = entry.stat()
            except FileNotFoundError:
                continue
            entries.append((st.st_mtime, entry.name, st.st_size))
        entries.sort()
        self._disk = OrderedDict((name, size) for _, name, size in entries)
        self._disk_bytes = sum(size for _, _, size in entries)

    def _evict_locked(self, protect: str | None) -> None:
        self._rescan()
        target = int(self.config.max_bytes * _EVICT_TO)
        for hash in list(self._disk):
            if self._disk_bytes <= target:
                break
            if hash == protect:
                continue
            (self._dir / hash).unlink(missing_ok=True)
            self._forget_disk_locked(hash)
            self._forget_mem_locked(hash)

    def _remember_locked(self, hash: str, data: bytes) -> None:
        if self.config.frequency_counters == 0 or len(data) > self._mem_max_bytes:
            return
        if hash in self._mem:
            self._mem.move_to_end(hash)
            return
        self._mem[hash] = data
        self._mem_bytes += len(data)
        while self._mem and (
            self._mem_bytes > self._mem_max_bytes or len(self._mem) > self.config.frequency_counters
        ):
            _, old = self._mem.popitem(last=False)
            self._mem_bytes -= len(old)

    def _forget_disk_locked(self, hash: str) -> None:
        size = self._disk.pop(hash, None)
        if size is not None:
            self._disk_bytes -= size

    def _forget_mem_locked(self, hash: str) -> None:
        data = self._mem.pop(hash, None)
        if data is not None:
            self._mem_bytes -= len(data)

    def _drop_corrupt(self, path: Path, hash: str) -> None:
        path.unlink(missing_ok=True)
        with self._lock:
            self._forget_disk_locked(hash)
            self._forget_mem_locked(hash)


def open_blob_cache(config: BlobCacheConfig) -> BlobCache:
    """Open (creating if needed) the blob cache described by ``config``.

    Blobs cached by earlier processes in the same directory are reused; stale temporary
    files of crashed writers are removed when older than a minute.

    Raises:
        OSError: the directory cannot be created or read.

    """
    cache = BlobCache(config)
    _remove_stale_temporaries(cache.directory)
    return cache


def _remove_stale_temporaries(directory: Path) -> None:
    import time

    cutoff = time.time() - 60
    for entry in os.scandir(directory):
        if entry.name.startswith(_TMP_PREFIX):
            try:
                if entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)
            except FileNotFoundError:
                pass
