"""Bounded reads of long backlogs and big maps, on both stores, and the matcher's demand.

Matching reads only the prefix of each Channel's backlog its Waits can take
(``channel_demand``); these tests check that prefix gives the very matches the whole backlog
gives, that the stores return it in publish order, and that map loads through the map index
return exactly the maps asked for.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import msgspec
import pytest
from dex._protocol import ConditionSpec, WaitSpec
from dex_server.engine import WaitingExecution, channel_demand, match_waits
from dex_server.store import SqliteStore, Store, StoredValue, Tx
from dex_server.store.postgres import PostgresStore

from tests._pg import db_url, postgres_reachable

__all__ = ["db_url"]  # a fixture, used by name

pytestmark = pytest.mark.store_independent  # each test opens the stores it checks itself


# --------------------------------------------------------------------------- the matcher


Mode = Literal["all", "any", "skip", "any_combination"]


def _chan(name: str, lo: int, hi: int | None) -> ConditionSpec:
    return ConditionSpec(kind="channel", channel=name, min_count=lo, max_count=hi)


def _random_wait(rng: random.Random, names: list[str]) -> WaitSpec:
    conds = []
    for _ in range(rng.randint(1, 3)):
        lo = rng.randint(0, 3)
        hi = None if rng.random() < 0.1 else lo + rng.randint(0, 3)
        conds.append(_chan(rng.choice(names), lo, hi))
    modes: list[Mode] = ["all", "any", "any_combination", "skip"]
    mode = rng.choice(modes)
    if mode == "any_combination":
        groups = [[i] for i in range(len(conds))]
        if len(conds) > 1:
            groups.insert(0, list(range(len(conds))))
        return WaitSpec(
            mode=mode,
            conditions=[
                msgspec.structs.replace(c, condition_id=f"c{i}") for i, c in enumerate(conds)
            ],
            groups=groups,
        )
    return WaitSpec(mode=mode, conditions=conds)


def test_the_demanded_prefix_matches_exactly_as_the_whole_backlog() -> None:
    rng = random.Random(7)
    names = ["a", "b", "c"]
    for _ in range(2000):
        waiting = [
            WaitingExecution(execution_id=f"e{i}", wait=_random_wait(rng, names))
            for i in range(rng.randint(1, 5))
        ]
        full = {n: [f"{n}{k}" for k in range(rng.randint(0, 40))] for n in names}
        demand = channel_demand(waiting)
        prefix = {n: ids if demand.get(n) is None else ids[: demand[n]] for n, ids in full.items()}
        assert match_waits(waiting, prefix, 0.0) == match_waits(waiting, full, 0.0)


def test_demand_sums_the_caps_per_channel_and_is_unbounded_without_a_maximum() -> None:
    def w(*conds: ConditionSpec, mode: Mode = "all") -> WaitingExecution:
        return WaitingExecution(execution_id="e", wait=WaitSpec(mode=mode, conditions=list(conds)))

    assert channel_demand([w(_chan("a", 1, 1)), w(_chan("a", 0, 2), _chan("b", 3, 1))]) == {
        "a": 3,
        "b": 3,
    }
    assert channel_demand([w(_chan("a", 1, None)), w(_chan("a", 1, 1))]) == {"a": None}
    assert channel_demand([w(_chan("a", 5, 5), mode="skip")]) == {}


# --------------------------------------------------------------------------- the stores


def _stored(data: object) -> StoredValue:
    raw = msgspec.json.encode(data)
    return StoredValue(value=msgspec.Raw(raw), blob=None, size=len(raw))


@pytest.fixture
def stores(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[list[Store]]:
    """An SQLite store and, when PostgreSQL is reachable, a PostgreSQL one (opened by
    the test, on its event loop)."""
    out: list[Store] = [SqliteStore(tmp_path / "db", fsync=False)]
    if postgres_reachable():
        out.append(PostgresStore(request.getfixturevalue("db_url"), fsync=False))
    yield out


N = 1200


def _fill(tx: Tx) -> None:
    for k in range(N):  # two Channels interleaved, and another run's messages
        tx.channels.publish("run-1", "jobs", f"j{k}", msgspec.json.encode(k))
        if k % 3 == 0:
            tx.channels.publish("run-1", "other", f"o{k}", b"0")
            tx.channels.publish("run-2", "jobs", f"x{k}", b"0")
    for k in range(N):
        tx.state.write("run-1", f"Log/{k:06}", _stored(k))
    for k in range(4):
        tx.state.write("run-1", f"Calls/{k}", _stored(k))
    tx.state.write("run-1", "Plain", _stored("p"))
    tx.state.write("run-2", "Calls/0", _stored("not mine"))


async def test_bounded_pending_ids_keep_publish_order_and_take_finds_them(
    stores: list[Store],
) -> None:
    for store in stores:
        store.open()
        await store.run(_fill)

        def drain_in_steps(tx: Tx) -> list[str]:
            seen: list[str] = []
            for _ in range(50):  # as run_matching does: read the prefix, take it
                ids = tx.channels.pending_ids("run-1", ["jobs", "other"], {"jobs": 7, "other": 0})
                assert ids["other"] == []
                taken = tx.channels.take("run-1", ids["jobs"])
                assert sorted(taken) == sorted(ids["jobs"])
                seen.extend(ids["jobs"])
            return seen

        seen = await store.run(drain_in_steps)
        assert seen == [f"j{k}" for k in range(350)], type(store).__name__

        def rest(tx: Tx) -> dict[str, list[str]]:
            return tx.channels.pending_ids("run-1", ["jobs", "other", "none"])

        left = await store.read(rest)
        assert left["jobs"] == [f"j{k}" for k in range(350, N)]
        assert left["other"] == [f"o{k}" for k in range(0, N, 3)]
        assert left["none"] == []
        assert await store.run(lambda tx: tx.channels.delete("run-1", "jobs", "j350")) == len(
            b"350"
        )
        await store.close()


async def test_map_loads_return_exactly_the_maps_asked_for(stores: list[Store]) -> None:
    for store in stores:
        store.open()
        await store.run(_fill)

        def load(tx: Tx) -> tuple[dict[str, StoredValue], dict[str, StoredValue]]:
            return tx.state.of_maps("run-1", ["Calls"]), tx.state.of_maps("run-1", ["Log", "Calls"])

        calls, both = await store.read(load)
        assert sorted(calls) == [f"Calls/{k}" for k in range(4)]
        assert msgspec.json.decode(calls["Calls/2"].value or b"") == 2
        assert len(both) == N + 4 and "Plain" not in both
        assert msgspec.json.decode(both["Log/001199"].value or b"") == 1199
        await store.close()
