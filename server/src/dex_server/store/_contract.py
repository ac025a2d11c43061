"""The store contract, split per aggregate. Dialects implement these in ``store/<dialect>/``.

Every method runs inside the transaction of the job that calls it (see
:class:`Store.submit`); none commits on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from dex._protocol import FlowSpec

from dex_server.store._records import ExecRecord, FlowRecord, PendingMessage, StoredValue
from dex_server.store._search import SearchRepo

Snapshot = tuple[dict[str, StoredValue], dict[str, int]]
"""A run's singleton Attributes and the sizes of its non-empty Channels."""


class FlowsStore(Protocol):
    def insert(self, flow: FlowRecord) -> bool:
        """Insert a new running run; ``False`` (nothing written) when its Flow ID has one.

        The database enforces one running run per Flow ID (a unique partial index): a
        concurrent start of the same ID on another server waits for this transaction and
        then gets ``False`` (or this one does).
        """

    def update(self, flow: FlowRecord) -> None: ...
    def get(self, run_id: str) -> FlowRecord | None: ...
    def get_with_execution(
        self, run_id: str, execution_id: str
    ) -> tuple[FlowRecord | None, ExecRecord | None]:
        """``get(run_id)`` and ``executions.get(run_id, execution_id)`` in one database trip.

        Every Step result loads both first; on PostgreSQL the two reads travel together.
        """

    def latest(self, flow_id: str) -> FlowRecord | None:
        """The Flow ID's running run, else its newest one."""

    def page(
        self, *, flow_type: str | None, status: str | None, limit: int, before_run_id: str | None
    ) -> list[FlowRecord]: ...
    def running(self) -> list[FlowRecord]: ...
    def due_for_deletion(self, now: float, limit: int) -> list[str]: ...
    def delete(self, run_id: str) -> None: ...


class SpecsStore(Protocol):
    """Every version of every Flow type's spec, keyed by Flow type and version (a hash)."""

    def put(self, version: str, spec: FlowSpec, now: float) -> None:
        """Store a version, or make a stored one the latest again (``updated_at=now``)."""

    def get(self, flow_type: str, version: str) -> FlowSpec | None: ...
    def latest(self, flow_type: str) -> tuple[str, FlowSpec] | None:
        """``(version, spec)`` stored or made the latest most recently."""

    def all(self) -> list[tuple[str, FlowSpec, float]]:
        """Every ``(version, spec, updated_at)``."""


class ExecutionsStore(Protocol):
    def put(self, e: ExecRecord) -> None: ...
    def get(self, run_id: str, execution_id: str) -> ExecRecord | None: ...
    def delete(self, run_id: str, execution_id: str) -> None:
        """Delete an execution that ended, and its timers."""

    def of_run(self, run_id: str) -> list[ExecRecord]: ...
    def waiting(self, run_id: str) -> list[ExecRecord]:
        """The run's executions in the ``waiting`` phase (the others are not decoded)."""

    def delete_run(self, run_id: str) -> None: ...


class StateStore(Protocol):
    def get(self, run_id: str, name: str) -> StoredValue | None: ...
    def singletons(self, run_id: str) -> dict[str, StoredValue]: ...
    def snapshot(self, run_id: str, flow_type: str = "") -> Snapshot:
        """``singletons(run_id)`` and ``channels.sizes(run_id)`` in one database trip.

        What every task snapshot reads; on PostgreSQL the two reads travel together, and
        on SQLite too once the maps of ``flow_type`` (the run's type, if given) are known.
        """

    def snapshot_later(
        self, run_id: str, fill: Callable[[Snapshot | None], None], flow_type: str = ""
    ) -> None:
        """``fill(snapshot(run_id, flow_type))`` as of this point of the job, at once or later.

        PostgreSQL sends the read with the transaction's COMMIT and calls ``fill`` once
        that came back (one round trip less per Step), before the job's future resolves:
        ``fill(None)`` if the transaction committed but the read could not be used, no
        call at all if it did not commit. SQLite reads at once and calls ``fill`` at the
        same point, after the COMMIT, or never.
        """

    def of_maps(self, run_id: str, maps: Sequence[str]) -> dict[str, StoredValue]: ...
    def of_names(self, run_id: str, names: Sequence[str]) -> dict[str, StoredValue]: ...
    def of_range(
        self, run_id: str, map_name: str, start: str | None, end: str | None, limit: int | None
    ) -> list[tuple[str, StoredValue]]: ...
    def names(self, run_id: str) -> list[str]: ...
    def sizes_of(self, run_id: str, names: Sequence[str]) -> dict[str, int]:
        """The stored sizes of those of ``names`` that are set (one statement)."""

    def write(self, run_id: str, name: str, value: StoredValue | None) -> int: ...
    def write_many(
        self,
        run_id: str,
        writes: Sequence[tuple[str, StoredValue | None]],
        old_sizes: Mapping[str, int] | None = None,
    ) -> int:
        """Write or delete values (each name once); return the change in stored bytes.

        ``old_sizes``: what :meth:`sizes_of` returned for these names earlier in the same
        transaction (nothing wrote them since), so they are not read again.
        """

    def delete_run(self, run_id: str) -> None: ...


class ChannelsStore(Protocol):
    def publish(self, run_id: str, channel: str, message_id: str, value: bytes) -> None: ...
    def pending_ids(
        self,
        run_id: str,
        channels: Iterable[str],
        limits: Mapping[str, int | None] | None = None,
    ) -> dict[str, list[str]]:
        """Pending message ids per Channel, oldest first.

        At most ``limits[name]`` ids of a Channel (absent or ``None``: all of them).
        """

    def take(self, run_id: str, message_ids: Sequence[str]) -> dict[str, PendingMessage]: ...
    def delete(self, run_id: str, channel: str, message_id: str) -> int | None: ...
    def sizes(self, run_id: str) -> dict[str, int]: ...
    def pending(
        self, run_id: str, channels: Sequence[str], maps: Sequence[str]
    ) -> list[PendingMessage]: ...
    def delete_run(self, run_id: str) -> None: ...


class TimersStore(Protocol):
    def add(self, run_id: str, execution_id: str, fire_at: float) -> None: ...
    def take(self, run_id: str, execution_id: str, fire_at: float) -> bool:
        """Delete one timer; whether it was there (the job that takes it fires it)."""

    def clear(self, run_id: str, execution_id: str) -> None: ...
    def due_before(self, t: float, limit: int) -> list[tuple[float, str, str]]: ...
    def delete_run(self, run_id: str) -> None: ...


class HistoryStore(Protocol):
    def append(
        self, run_id: str, event_id: int, event_time: float, type_: str, payload: bytes
    ) -> None: ...
    def page(self, run_id: str, after: int, limit: int) -> list[tuple[int, float, str, bytes]]: ...
    def delete_run(self, run_id: str) -> None: ...


class BlobsStore(Protocol):
    def put(self, hash_: str, data: bytes) -> None: ...
    def get(self, hash_: str) -> bytes | None: ...
    def reference(self, run_id: str, hash_: str) -> None: ...
    def release_run(self, run_id: str) -> int: ...


class ClaimsStore(Protocol):
    """Which server dispatches which execution.

    ``ExecutionsStore.put`` claims a dispatchable execution for the writing server (and
    unclaims a waiting one); these methods move claims. ``claim_*`` return the claimed
    ``(run_id, execution_id)`` pairs; rows other servers are claiming are skipped. Every
    change of a row's claim adds one to its ``claim_epoch`` (the fencing token: writes on
    behalf of an attempt check the claim and epoch it was dispatched under).
    """

    def release(
        self, run_id: str, execution_id: str, now: float, start_by: float | None = None
    ) -> None:
        """Give this server's claim back to the pool (no local Worker serves it).

        ``start_by``: when it fails unless some server claims it (None: never).
        """

    def claim_pool(
        self, flow_types: Sequence[str], now: float, limit: int
    ) -> list[tuple[str, str]]: ...
    def claim_unserved(self, now: float, limit: int) -> list[tuple[str, str]]:
        """Claim pooled executions whose ``start_by`` passed by ``now`` (nobody took them)."""

    def claim_from(self, server_ids: Sequence[str]) -> list[tuple[str, str]]:
        """Claim the dispatchable executions of dead servers.

        Where only one server can use the store, every unclaimed one as well.
        """

    def mine_ready(self, now: float) -> list[tuple[str, str]]:
        """This server's claims that are ready to dispatch now."""

    def lost(self, held: Sequence[tuple[str, str, int]]) -> list[tuple[str, str]]:
        """Which of ``(run_id, execution_id, claim_epoch)`` this server no longer holds.

        Every claim change bumps the row's ``claim_epoch``; an execution whose row names
        another server, or this one at another epoch, was taken over (fenced). Gone rows
        are not reported.
        """


class ServersStore(Protocol):
    def dead(self, lease_s: float) -> list[str]:
        """Servers that stopped (locked for this transaction; others skip them).

        Judged by the store's clock (heartbeats are written with it too), so servers whose
        clocks disagree never compare them.
        """

    def remove(self, server_ids: Sequence[str]) -> None: ...


class SignalsStore(Protocol):
    def notify(self, kind: str, data: str) -> None:
        """Tell every other server, when this transaction commits (no-op for one server)."""


class RpcCallsStore(Protocol):
    """RPCs handed to another server's Workers."""

    def add(
        self, call_id: str, flow_type: str, timeout_s: float, request: bytes, now: float
    ) -> None: ...
    def claim(self, flow_types: Sequence[str], limit: int) -> list[tuple[str, bytes]]: ...
    def finish(self, call_id: str, result: bytes) -> None: ...
    def state(self, call_id: str) -> tuple[bool, bytes | None] | None:
        """``(claimed, result)`` of a call, or ``None`` when it is gone."""

    def withdraw(self, call_id: str) -> bool:
        """Delete a call nobody claimed; whether it was deleted."""

    def delete(self, call_id: str) -> None: ...
    def abandon(self, server_ids: Sequence[str]) -> None:
        """Dead servers: their claimed calls go back to the pool, their own calls go."""


class RpcRequestsStore(Protocol):
    """The first outcome of each RPC invocation that carried a ``request_id``, per run.

    Callers hold the run's row lock (``flows.get`` in a writing transaction) around
    :meth:`add`, so two invocations of one ``request_id`` serialise and the second sees the
    first's row.
    """

    def add(self, run_id: str, request_id: str, output: bytes | None, now: float) -> bool:
        """Record the outcome unless one is recorded; whether this call recorded it."""

    def get(self, run_id: str, request_id: str) -> tuple[bytes | None] | None:
        """``(output,)`` of the recorded outcome (``None`` output: none), or ``None``."""

    def delete_run(self, run_id: str) -> None: ...


class LocksStore(Protocol):
    """Attribute lock keys held in the store, so that several servers see each other's.

    Callers hold the run's row lock (``flows.get`` in a writing transaction) while they
    look and take, so two takers of one run serialise.
    """

    def held(self, run_id: str, keys: Sequence[str], holder: str) -> list[tuple[str, str]]:
        """``(key, holder)`` of each of ``keys`` held by someone other than ``holder``."""

    def take(self, run_id: str, keys: Sequence[str], holder: str) -> None:
        """Record ``holder`` (on this server) as holding ``keys`` (free or its own)."""

    def mine(self, run_id: str, holder: str) -> list[str]:
        """The keys ``holder`` holds through this server (row-locked for this transaction)."""

    def drop(self, run_id: str, key: str) -> None:
        """Free one key whatever holds it (its holder is gone)."""

    def release(self, run_id: str, holder: str) -> int:
        """Free every key ``holder`` holds through this server; how many."""

    def release_run(self, run_id: str) -> None: ...
    def abandon(self, server_ids: Sequence[str]) -> list[tuple[str, str, str]]:
        """Free what dead servers held; the freed ``(run_id, key, holder)``."""


StreamRow = tuple[int, float, str, bytes]  # (seq, created_at, source, value)


class StreamsStore(Protocol):
    """Stream messages kept in the store (when several servers share it)."""

    def append(
        self, key: tuple[str, str, str], source: str, value: bytes, now: float, capacity: int
    ) -> int: ...
    def after(self, key: tuple[str, str, str], seq: int, limit: int) -> list[StreamRow]: ...
    def before(self, key: tuple[str, str, str], seq: int | None, limit: int) -> list[StreamRow]: ...
    def delete_flow(self, flow_type: str, flow_id: str) -> None: ...


@dataclass(frozen=True)
class Tx:
    """The repositories of one store, bound to the writer's connection."""

    flows: FlowsStore
    specs: SpecsStore
    executions: ExecutionsStore
    state: StateStore
    channels: ChannelsStore
    timers: TimersStore
    history: HistoryStore
    blobs: BlobsStore
    claims: ClaimsStore
    servers: ServersStore
    signals: SignalsStore
    rpc_calls: RpcCallsStore
    rpc_requests: RpcRequestsStore
    locks: LocksStore
    streams: StreamsStore
    search: SearchRepo


T = TypeVar("T")


class StoreUnavailableError(Exception):
    """The database cannot be reached (or a commit's outcome is unknown); retry later."""


class StoreNotWritableError(StoreUnavailableError):
    """The store cannot be opened or written (a read-only file or folder, say).

    No server can run on it until that is fixed; raised before the server listens.
    """


class Store(Protocol):
    """A durable store: jobs (``Callable[[Tx], T]``) run in transactions, in groups.

    ``submit``'s future resolves after the job's transaction committed (or with the job's
    exception; the job's writes are then rolled back, and nothing else of its group). A
    job may run more than once before its transaction commits (its group starts over when
    another job of it raises, or after a conflict with another server), so it changes
    nothing but the store's rows and what it returns. A dialect that loses its database
    fails jobs with :class:`StoreUnavailableError`.
    """

    kind: str
    shared: bool
    """Whether several servers may use the store at once (then they coordinate through it)."""
    server_id: str
    batches: int
    jobs: int
    submitted: int
    """Jobs handed to :meth:`submit` so far (on the event loop thread): a caller that saw it
    move by one, its own job, knows nothing else reached this process's store meanwhile."""

    def acquire(self) -> None:
        """Take the store for this process before serving (idempotent; ``open`` does too).

        SQLite locks its data folder (a second server on it gets ``DataFolderInUseError``);
        a no-op where several servers share the store.
        """

    def release(self) -> None:
        """Give back what :meth:`acquire` took (``close`` does too)."""

    def open(self) -> None: ...
    def start_signals(self, on_signal: Callable[[str, str], None]) -> None:
        """Deliver other servers' signals ``(kind, data)`` on the event loop.

        Also keeps this server's liveness heartbeat. A no-op where one server owns the store.
        """

    async def close(self) -> None: ...
    def submit(
        self, job: Callable[[Tx], T], *, inline: bool = False, alone: bool = False
    ) -> asyncio.Future[T]:
        """Queue ``job``; the future resolves after its transaction commits.

        ``inline``: the caller allows the job to run on the calling (event loop) thread
        when the store has nothing else queued or running, which saves two thread
        hand-offs. Only for short jobs on the hot path; a store may ignore it.
        ``alone``: the job may change very many rows; it runs in a transaction of its
        own, where a store would otherwise journal its changes in memory to roll back
        only it (a store may ignore it).
        """
        ...

    async def run(self, job: Callable[[Tx], T], *, alone: bool = False) -> T: ...
    async def read(self, job: Callable[[Tx], T]) -> T:
        """Run a read-only job off the writer (one consistent snapshot)."""

    def describe(self) -> str:
        """Where the data lives, for logs and banners (no credentials)."""
