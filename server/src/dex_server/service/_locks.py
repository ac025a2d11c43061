"""Attribute locks in the store, so that several servers see each other's locks.

Each server orders its own Step methods and RPCs on lock keys in memory (the dispatcher).
When several servers share the store, a holder also records its keys in
``attribute_locks`` before it runs: a Step method attempt while its task is built, an RPC
before its snapshot. Keys are taken all at once or not at all, under the run's row lock.
A Step attempt's keys are freed in the transaction that commits its outcome; an RPC's when
it ends; a dead server's by the server that takes it over. A server frees only keys held
through itself: a redelivered attempt keeps its holder name, and the server it was taken
from must not free the keys its new server took. A row whose attempt no longer
exists (it was retried, cancelled or its Flow closed) is stale and is dropped by the next
taker, so a lost release never blocks a key for good.

A transactional RPC also takes the key ``#commit`` and marks the run
(``FlowRecord.commit_hold``): Step results of that run wait until the RPC committed, on
whichever server they arrive.
"""

from __future__ import annotations

from collections.abc import Sequence

from dex._protocol import ErrorCode

from dex_server.service._common import ServiceError
from dex_server.store import Tx

COMMIT_KEY = "#commit"
_RPC = "rpc:"


class CommitHeldError(Exception):
    """A transactional RPC holds the run's Step commits; commit again once it ends."""


def attempt_holder(execution_id: str, kind: str, attempt: int) -> str:
    """The holder name of one Step method attempt."""
    return f"{execution_id}:{kind}#{attempt}"


def rpc_holder(call_id: str) -> str:
    return _RPC + call_id


def _stale(tx: Tx, run_id: str, holder: str) -> bool:
    if holder.startswith(_RPC):
        return False  # an RPC frees its keys when it ends, or its server is taken over
    eid, _, rest = holder.partition(":")
    kind, _, attempt = rest.partition("#")
    e = tx.executions.get(run_id, eid)
    return e is None or e.phase != kind or str(e.attempt) != attempt


def take(tx: Tx, run_id: str, keys: Sequence[str], holder: str) -> bool:
    """Take every key of ``keys`` for ``holder``, or none; the caller holds the run's row."""
    # a key named twice (declared and asked for again in the call's options) is one lock
    keys = list(dict.fromkeys(keys))
    free = True
    for key, other in tx.locks.held(run_id, keys, holder):
        if _stale(tx, run_id, other):
            tx.locks.drop(run_id, key)
        else:
            free = False
    if free:
        tx.locks.take(run_id, keys, holder)
    return free


def release(tx: Tx, run_id: str, holder: str) -> None:
    """Free what ``holder`` holds and wake the servers waiting for it."""
    if tx.locks.release(run_id, holder):
        tx.signals.notify("unlock", run_id)


def check_held(tx: Tx, run_id: str, keys: Sequence[str], holder: str) -> None:
    """Raise unless ``holder`` still holds every key of ``keys`` through this server.

    An RPC's commit calls it in its own transaction: a server that was taken over while the
    RPC ran lost its keys (another holder may have them now), so the effects must not land.
    """
    flow = tx.flows.get(run_id)  # the row lock, as for every write of the run
    if flow is None or flow.status != "running":
        return  # nothing commits on a closed run; the commit reports it
    if not set(keys) <= set(tx.locks.mine(run_id, holder)):
        raise ServiceError(
            ErrorCode.UNAVAILABLE,
            "another server took this server's work over while the RPC ran; its effects"
            " were not applied (retry)",
        )


def take_for_rpc(tx: Tx, run_id: str, keys: Sequence[str], holder: str) -> bool:
    tx.flows.get(run_id)  # the row lock
    return take(tx, run_id, keys, holder)


def hold_commits(tx: Tx, run_id: str, holder: str) -> bool:
    """Make Step results of ``run_id`` wait for ``holder``; False while another holds them."""
    flow = tx.flows.get(run_id)
    if flow is None or flow.status != "running":
        return True  # nothing commits on a closed run; the RPC reports it
    if not take(tx, run_id, [COMMIT_KEY], holder):
        return False
    flow.commit_hold = holder
    tx.flows.update(flow)
    return True


def release_rpc(tx: Tx, run_id: str, holder: str) -> None:
    """Free an RPC's keys and its commit hold."""
    flow = tx.flows.get(run_id)
    if flow is not None and flow.commit_hold == holder:
        flow.commit_hold = None
        tx.flows.update(flow)
    release(tx, run_id, holder)


def abandon(tx: Tx, server_ids: Sequence[str]) -> None:
    """Free the keys and commit holds of dead servers."""
    runs: set[str] = set()
    for run_id, key, holder in tx.locks.abandon(server_ids):
        runs.add(run_id)
        if key == COMMIT_KEY:
            flow = tx.flows.get(run_id)
            if flow is not None and flow.commit_hold == holder:
                flow.commit_hold = None
                tx.flows.update(flow)
    for run_id in sorted(runs):
        tx.signals.notify("unlock", run_id)
