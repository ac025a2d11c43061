"""A bounded, persistent cache of blobs, shared by Clients and Workers.

Large values travel as blob references. A Worker resolves them through
``GET /v1/blobs/{hash}`` once and keeps the bytes here, so later tasks that carry the same
reference (a long agent history, say) cost a local read instead of a download.

``BlobCache`` is a Protocol: Clients and Workers accept any object with its methods.
``open_blob_cache`` returns the built-in implementation, ``DiskBlobCache``.

Layout of ``DiskBlobCache``: ``<directory>/blobs/<sha256 of the blob id>`` holds the SHA-256
digest of the payload (32 bytes) followed by the payload; writers create a private file
in ``<directory>/tmp`` and ``os.replace`` it into place, so several processes can share
the directory: a reader sees a whole file or none. Every read verifies the digest; a
corrupt file is deleted and reported as a miss. A file's modification time is its last use
(touched on read), which orders eviction across processes and restarts.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

__all__ = ["BlobCache", "BlobCacheConfig", "DiskBlobCache", "blob_hash", "open_blob_cache"]

_NAME_RE = re.compile(r"[0-9a-f]{64}")
_DIGEST_BYTES = 32
_BLOBS_DIR = "blobs"
_TMP_DIR = "tmp"
_LEGACY_TMP_PREFIX = ".tmp-"
_STALE_TMP_S = 60.0
# After an eviction the cache holds at most this share of max_bytes, so evictions (each
# rescans the directory to see other processes' files) stay rare.
_EVICT_TO = 0.9
_MEMORY_FRONT_SHARE = 8  # the in-memory front holds at most max_bytes / 8 ...
_MEMORY_FRONT_CAP = 64 * 1024 * 1024  # ... and never more than 64 MiB
_DEFAULT_FREQUENCY_COUNTERS = 10_000


@dataclass(frozen=True)
class BlobCacheConfig:
    """Where and how big the blob cache is: ``BlobCacheConfig(".dex-cache", 64 * 1024**2)``.

    Attributes:
        directory: folder of the cache files; created if missing. Several processes may
            share it.
        max_bytes: bound of the bytes kept on disk; least recently used blobs are evicted
            beyond it. A blob that does not fit is not cached (``put`` returns False).
        frequency_counters: how many recently used blobs the in-memory front tracks
            (default 10,000; 0 means the default). Hot blobs are served from memory
            without touching the disk.

    Raises:
        ValueError: ``directory`` is empty, ``max_bytes`` is not positive or
            ``frequency_counters`` is negative.

    """

    directory: str | os.PathLike[str]
    max_bytes: int
    frequency_counters: int = _DEFAULT_FREQUENCY_COUNTERS

    def __post_init__(self) -> None:
        if not os.fspath(self.directory):
            raise ValueError("BlobCacheConfig.directory is required")
        if self.max_bytes <= 0:
            raise ValueError("BlobCacheConfig.max_bytes must be positive")
        if self.frequency_counters < 0:
            raise ValueError("BlobCacheConfig.frequency_counters must be >= 0")
        if self.frequency_counters == 0:
            object.__setattr__(self, "frequency_counters", _DEFAULT_FREQUENCY_COUNTERS)


@runtime_checkable
class BlobCache(Protocol):
    """What Clients and Workers need of a blob cache; ``open_blob_cache`` builds one.

    Implement it to keep blobs elsewhere (another store, a test double). Blob ids are
    opaque non-empty strings and a blob's content never changes, so an implementation may
    keep a blob as long as it likes and drop it at any time. Workers call it from their
    event loop and from handler threads: methods must be thread-safe and quick.
    """

    @property
    def config(self) -> BlobCacheConfig:
        """The configuration the cache was opened with."""
        ...

    def get(self, blob_id: str) -> bytes | None:
        """Return the payload of ``blob_id``, or None when it is not cached."""
        ...

    def put(self, blob_id: str, payload: bytes) -> bool:
        """Cache ``payload`` under ``blob_id``; return whether it is now cached."""
        ...

    def delete(self, blob_id: str) -> None:
        """Drop ``blob_id`` (no error when absent)."""
        ...

    def delete_all(self) -> None:
        """Drop every cached blob."""
        ...

    def close(self) -> None:
        """Release the cache; later calls other than ``close`` raise ``RuntimeError``."""
        ...


def blob_hash(data: bytes) -> str:
    """Return the reference of ``data`` the server uses: its lowercase hex sha256."""
    return hashlib.sha256(data).hexdigest()


def _file_name(blob_id: str) -> str:
    if not isinstance(blob_id, str):
        raise TypeError(f"blob_id must be a str, got {type(blob_id).__qualname__}")
    if not blob_id:
        raise ValueError("blob_id must not be empty")
    return hashlib.sha256(blob_id.encode("utf-8", "surrogatepass")).hexdigest()


class DiskBlobCache:
    """The built-in persistent ``BlobCache``; build it with ``open_blob_cache``.

    All methods are thread-safe. They do small blocking file I/O; callers on an event loop
    accept that (reads are local and usually served from the in-memory front).
    """

    def __init__(self, config: BlobCacheConfig) -> None:
        self._config = config
        self._root = Path(config.directory)
        self._dir = self._root / _BLOBS_DIR
        self._tmp = self._root / _TMP_DIR
        self._dir.mkdir(parents=True, exist_ok=True)
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._closed = False
        # Disk index of this process's view: file name -> size, in LRU order (oldest first).
        self._disk: OrderedDict[str, int] = OrderedDict()
        self._disk_bytes = 0
        # Memory front: file name -> payload.
        self._mem: OrderedDict[str, bytes] = OrderedDict()
        self._mem_bytes = 0
        self._mem_max_bytes = min(config.max_bytes // _MEMORY_FRONT_SHARE, _MEMORY_FRONT_CAP)
        self._rescan()
        if self._disk_bytes > config.max_bytes:
            with self._lock:
                self._evict_locked(protect=None)

    # ------------------------------------------------------------------ public API

    @property
    def config(self) -> BlobCacheConfig:
        """The configuration the cache was opened with."""
        return self._config

    @property
    def directory(self) -> Path:
        """The cache directory."""
        return self._root

    @property
    def size_bytes(self) -> int:
        """Bytes on disk as this process last saw them."""
        return self._disk_bytes

    def get(self, blob_id: str) -> bytes | None:
        """Return the payload of ``blob_id``, or None when absent (or found corrupt).

        Raises:
            RuntimeError: the cache is closed.
            ValueError: ``blob_id`` is empty.

        """
        name = self._name(blob_id)
        with self._lock:
            data = self._mem.get(name)
            if data is not None:
                self._mem.move_to_end(name)
                if name in self._disk:
                    self._disk.move_to_end(name)
                return data
        path = self._dir / name
        try:
            raw = path.read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            with self._lock:
                self._forget_disk_locked(name)
            return None
        data = raw[_DIGEST_BYTES:]
        if len(raw) < _DIGEST_BYTES or hashlib.sha256(data).digest() != raw[:_DIGEST_BYTES]:
            self._drop(path, name)
            return None
        try:
            os.utime(path)  # last use, for eviction order seen by every process
        except FileNotFoundError:
            pass
        with self._lock:
            if name in self._disk:
                self._disk.move_to_end(name)
            else:
                self._disk[name] = len(raw)
                self._disk_bytes += len(raw)
            self._remember_locked(name, data)
        return data

    def put(self, blob_id: str, payload: bytes) -> bool:
        """Store ``payload`` under ``blob_id``; evict old blobs beyond ``max_bytes``.

        Idempotent. Returns True when the blob is cached afterwards, False when it is
        larger than the cache.

        Raises:
            RuntimeError: the cache is closed.
            ValueError: ``blob_id`` is empty, or it is cached with other content (blob
                content never changes).

        """
        name = self._name(blob_id)
        data = bytes(payload)
        size = _DIGEST_BYTES + len(data)
        if size > self._config.max_bytes:
            return False
        digest = hashlib.sha256(data).digest()
        path = self._dir / name
        stored = self._stored_digest(path)
        if stored is not None and stored != digest:
            raise ValueError(f"blob id {blob_id!r} is already cached with other content")
        if stored is None:
            tmp = self._tmp / f"{os.getpid()}-{threading.get_ident()}-{name[:16]}"
            with open(tmp, "wb") as f:
                f.write(digest)
                f.write(data)
            os.replace(tmp, path)
        with self._lock:
            if name in self._disk:
                self._disk.move_to_end(name)
            else:
                self._disk[name] = size
                self._disk_bytes += size
            self._remember_locked(name, data)
            if self._disk_bytes > self._config.max_bytes:
                self._evict_locked(protect=name)
        return True

    def delete(self, blob_id: str) -> None:
        """Drop ``blob_id`` from memory and disk (no error when absent).

        Raises:
            RuntimeError: the cache is closed.

        """
        name = self._name(blob_id)
        self._drop(self._dir / name, name)

    def delete_all(self) -> None:
        """Delete every cached blob (files of other processes included).

        Raises:
            RuntimeError: the cache is closed.

        """
        self._check_open()
        with self._lock:
            for folder in (self._dir, self._tmp):
                for entry in folder.iterdir():
                    entry.unlink(missing_ok=True)
            self._disk.clear()
            self._disk_bytes = 0
            self._mem.clear()
            self._mem_bytes = 0

    def clear(self) -> None:
        """Same as ``delete_all``."""
        self.delete_all()

    def close(self) -> None:
        """Release the in-memory front; the files stay for the next ``open_blob_cache``.

        Safe to call more than once.
        """
        with self._lock:
            self._closed = True
            self._mem.clear()
            self._mem_bytes = 0

    def __contains__(self, blob_id: object) -> bool:
        return isinstance(blob_id, str) and bool(blob_id) and self.get(blob_id) is not None

    def __repr__(self) -> str:
        return f"DiskBlobCache({self._config!r})"

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("blob cache is closed")

    def _name(self, blob_id: str) -> str:
        self._check_open()
        return _file_name(blob_id)

    @staticmethod
    def _stored_digest(path: Path) -> bytes | None:
        try:
            with open(path, "rb") as f:
                head = f.read(_DIGEST_BYTES)
        except (FileNotFoundError, IsADirectoryError):
            return None
        return head if len(head) == _DIGEST_BYTES else None

    def _rescan(self) -> None:
        """Rebuild the disk index from the directory (ordered by last use)."""
        entries: list[tuple[float, str, int]] = []
        for entry in os.scandir(self._dir):
            if not _NAME_RE.fullmatch(entry.name):
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
        # Memory hits do not touch the files: replay this process's recent uses.
        for name in self._mem:
            if name in self._disk:
                self._disk.move_to_end(name)
        target = int(self._config.max_bytes * _EVICT_TO)
        for name in list(self._disk):
            if self._disk_bytes <= target:
                break
            if name == protect:
                continue
            (self._dir / name).unlink(missing_ok=True)
            self._forget_disk_locked(name)
            self._forget_mem_locked(name)

    def _remember_locked(self, name: str, data: bytes) -> None:
        if len(data) > self._mem_max_bytes:
            return
        if name in self._mem:
            self._mem.move_to_end(name)
            return
        self._mem[name] = data
        self._mem_bytes += len(data)
        while self._mem and (
            self._mem_bytes > self._mem_max_bytes
            or len(self._mem) > self._config.frequency_counters
        ):
            _, old = self._mem.popitem(last=False)
            self._mem_bytes -= len(old)

    def _forget_disk_locked(self, name: str) -> None:
        size = self._disk.pop(name, None)
        if size is not None:
            self._disk_bytes -= size

    def _forget_mem_locked(self, name: str) -> None:
        data = self._mem.pop(name, None)
        if data is not None:
            self._mem_bytes -= len(data)

    def _drop(self, path: Path, name: str) -> None:
        path.unlink(missing_ok=True)
        with self._lock:
            self._forget_disk_locked(name)
            self._forget_mem_locked(name)


def open_blob_cache(config: BlobCacheConfig) -> BlobCache:
    """Open (creating if needed) the blob cache described by ``config``.

    The result is a ``DiskBlobCache``. Blobs cached by earlier processes in the same
    directory are reused; stale temporary
    files of crashed writers are removed when older than a minute. Open one cache per
    process and share it between its Clients and Workers.

    Raises:
        OSError: the directory cannot be created or read.

    """
    cache = DiskBlobCache(config)
    _remove_stale_files(cache.directory)
    return cache


def _remove_stale_files(root: Path) -> None:
    cutoff = time.time() - _STALE_TMP_S
    for entry in os.scandir(root / _TMP_DIR):
        try:
            if entry.stat().st_mtime < cutoff:
                os.unlink(entry.path)
        except FileNotFoundError:
            pass
    # Files of the earlier flat layout (one file per content hash at the top level).
    for entry in os.scandir(root):
        if entry.is_file() and (
            _NAME_RE.fullmatch(entry.name) or entry.name.startswith(_LEGACY_TMP_PREFIX)
        ):
            try:
                os.unlink(entry.path)
            except FileNotFoundError:
                pass
