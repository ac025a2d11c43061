"""Resolve a task's blob references into values before the handler sees the task."""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict

import msgspec
from msgspec import Raw

from dex._blob_cache import BlobCache
from dex._protocol import Task
from dex._transport import HttpTransport
from dex._worker._stats import WorkerStats
from dex.errors import DexServiceError, ErrorSubStatus, StatusCode

# Without a configured BlobCache the Worker still keeps recent blobs in memory, so one hash
# is downloaded at most once while it stays hot.
_MEMO_MAX_BYTES = 64 * 1024 * 1024


class BlobFetchError(DexServiceError):
    """A blob could not be fetched or did not match its hash."""


class BlobResolver:
    def __init__(self, http: HttpTransport, cache: BlobCache | None, stats: WorkerStats) -> None:
        self._http = http
        self._cache = cache
        self._stats = stats
        self._memo: OrderedDict[str, bytes] = OrderedDict()
        self._memo_bytes = 0
        self._inflight: dict[str, asyncio.Future[bytes]] = {}

    async def resolve(self, task: Task) -> Task:
        """Return ``task`` with ``blob_refs`` / ``input_blob`` replaced by their bytes."""
        names = list(task.blob_refs)
        hashes = [task.blob_refs[n] for n in names]
        if task.input_blob:
            hashes.append(task.input_blob)
        values = await asyncio.gather(*(self.get(h) for h in hashes))
        attributes = dict(task.attributes)
        for name, data in zip(names, values, strict=False):
            attributes[name] = Raw(data)
        task_input = Raw(values[-1]) if task.input_blob else task.input
        return msgspec.structs.replace(
            task, attributes=attributes, blob_refs={}, input_blob=None, input=task_input
        )

    async def get(self, blob: str) -> bytes:
        data = self._local(blob)
        if data is not None:
            self._stats.blob_cache_hits += 1
            return data
        pending = self._inflight.get(blob)
        if pending is not None:
            await asyncio.wait([pending])  # not shield: the leader's cancellation is not ours
            if pending.cancelled():
                return await self.get(blob)
            self._stats.blob_cache_hits += 1
            return pending.result()
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._inflight[blob] = fut
        try:
            data = await self._download(blob)
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # mark retrieved: waiters may not exist
            raise
        finally:
            del self._inflight[blob]
        fut.set_result(data)
        self._store(blob, data)
        return data

    async def _download(self, blob: str) -> bytes:
        response = await self._http.raw("GET", f"/v1/blobs/{blob}")
        self._stats.blob_fetches += 1
        data = response.content
        if hashlib.sha256(data).hexdigest() != blob:
            raise BlobFetchError(
                StatusCode.DATA_LOSS,
                ErrorSubStatus.UNCATEGORIZED,
                f"blob {blob} from the server does not match its hash",
                "fetch_blob",
                None,
            )
        return data

    def _local(self, blob: str) -> bytes | None:
        if self._cache is not None:
            return self._cache.get(blob)
        data = self._memo.get(blob)
        if data is not None:
            self._memo.move_to_end(blob)
        return data

    def _store(self, blob: str, data: bytes) -> None:
        if self._cache is not None:
            self._cache.put(blob, data)
            return
        if len(data) > _MEMO_MAX_BYTES or blob in self._memo:
            return
        self._memo[blob] = data
        self._memo_bytes += len(data)
        while self._memo_bytes > _MEMO_MAX_BYTES:
            _, old = self._memo.popitem(last=False)
            self._memo_bytes -= len(old)
