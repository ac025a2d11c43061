"""A user implementation of the ``BlobCache`` Protocol, kept in a dict."""

from __future__ import annotations

from dex import BlobCacheConfig


class DictBlobCache:
    """Any object with the Protocol's methods is accepted as a blob cache."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.config = BlobCacheConfig("unused", 1 << 20)

    def get(self, blob_id: str) -> bytes | None:
        return self.blobs.get(blob_id)

    def put(self, blob_id: str, payload: bytes) -> bool:
        self.blobs[blob_id] = payload
        return True

    def delete(self, blob_id: str) -> None:
        self.blobs.pop(blob_id, None)

    def delete_all(self) -> None:
        self.blobs.clear()

    def close(self) -> None:
        pass
