"""The blob cache: ``BlobCache`` (a Protocol), ``BlobCacheConfig``, ``open_blob_cache``."""

from __future__ import annotations

from dex._blob_cache import BlobCache, BlobCacheConfig, open_blob_cache

__all__ = ["BlobCache", "BlobCacheConfig", "open_blob_cache"]
