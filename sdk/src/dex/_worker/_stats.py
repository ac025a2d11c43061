"""Counters a Worker keeps about its own activity (for tests, logs and benchmarks)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(kw_only=True)
class WorkerStats:
    """Live counters of one Worker; read them any time, never write them.

    Attributes:
        connections: WebSocket sessions that registered successfully.
        tasks_received: task frames received.
        tasks_completed: results sent.
        tasks_rejected: tasks declined (no slot, unknown Flow type, stopping).
        reserved_rpc_declines: Step tasks declined because only the slots reserved for
            RPCs were free (also counted in ``tasks_rejected``).
        tasks_cancelled: tasks cancelled by the server, by ``stop()`` or by a lost connection.
        blob_fetches: blobs downloaded from the server.
        blob_cache_hits: blob references served locally.

    """

    connections: int = 0
    tasks_received: int = 0
    tasks_completed: int = 0
    tasks_rejected: int = 0
    reserved_rpc_declines: int = 0
    tasks_cancelled: int = 0
    blob_fetches: int = 0
    blob_cache_hits: int = 0

    def as_dict(self) -> dict[str, int]:
        """Return the counters as a plain dict."""
        return dataclasses.asdict(self)
