"""Several Attribute writes of one job in one call: values and the change in stored bytes.

On SQLite and on PostgreSQL (when reachable): ``write_many`` leaves the same rows as one
``write`` per value, and returns the sum of the changes each ``write`` would have returned
(new values, replaced ones, deletes, deletes of names never written, map instances).
"""

from __future__ import annotations

import msgspec
import pytest
from dex_server.store import Store, StoredValue, Tx

from tests._pg import db_url, stores

__all__ = ["db_url", "stores"]  # fixtures, used by name

pytestmark = pytest.mark.store_independent  # each test opens the stores it checks itself


def _v(text: str) -> StoredValue:
    data = text.encode()
    return StoredValue(value=msgspec.Raw(data), size=len(data))


def _all(tx: Tx, run_id: str) -> dict[str, bytes | None]:
    values = tx.state.of_names(run_id, tx.state.names(run_id))
    return {name: None if v.value is None else bytes(v.value) for name, v in values.items()}


async def test_write_many_matches_one_write_per_value(stores: list[Store]) -> None:
    before = [("a", _v("1234")), ("b", _v("xy")), ("m/k1", _v("mmm")), ("gone", _v("zzzzz"))]
    after: list[tuple[str, StoredValue | None]] = [
        ("a", _v("12")),  # replaced: 4 -> 2
        ("gone", None),  # deleted: -5
        ("never", None),  # deleting what was never written: 0
        ("c", _v("new")),  # new: +3
        ("m/k2", _v("k")),  # a new map instance: +1
    ]
    for store in stores:
        store.open()
        name = type(store).__name__
        assert await store.run(lambda tx: tx.state.write_many("run-1", before)) == 14, name
        assert await store.run(lambda tx: tx.state.write_many("run-1", after)) == -3, name
        assert await store.run(lambda tx: tx.state.write_many("run-1", [])) == 0, name

        def one_by_one(tx: Tx) -> int:
            total = sum(tx.state.write("run-2", n, v) for n, v in before)
            return total + sum(tx.state.write("run-2", n, v) for n, v in after)

        assert await store.run(one_by_one) == 11, name
        written = await store.read(lambda tx: _all(tx, "run-1"))
        assert written == await store.read(lambda tx: _all(tx, "run-2")), name
        assert written == {"a": b"12", "b": b"xy", "c": b"new", "m/k1": b"mmm", "m/k2": b"k"}
        maps = await store.read(lambda tx: tx.state.of_maps("run-1", ["m"]))
        assert sorted(maps) == ["m/k1", "m/k2"], name
        await store.close()


async def test_write_many_takes_more_names_than_one_statement_holds(
    stores: list[Store],
) -> None:
    many = [(f"n{k:04}", _v("v" * (k % 7))) for k in range(1200)]
    again: list[tuple[str, StoredValue | None]] = [(n, None) for n, _ in many[::2]]
    total = sum(k % 7 for k in range(1200))
    removed = sum(k % 7 for k in range(0, 1200, 2))
    for store in stores:
        store.open()
        assert await store.run(lambda tx: tx.state.write_many("run-1", many)) == total
        assert await store.run(lambda tx: tx.state.write_many("run-1", again)) == -removed
        assert len(await store.read(lambda tx: tx.state.names("run-1"))) == 600
        await store.close()


async def test_sizes_read_before_spare_write_many_its_own_read(stores: list[Store]) -> None:
    before = [("a", _v("1234")), ("gone", _v("zzzzz")), ("m/k1", _v("mmm"))]
    after: list[tuple[str, StoredValue | None]] = [
        ("a", _v("12")),
        ("gone", None),
        ("never", None),
        ("m/k1", _v("mmmmmm")),
    ]
    for store in stores:
        store.open()
        name = type(store).__name__
        await store.run(lambda tx: tx.state.write_many("run-1", before))

        def with_sizes(tx: Tx) -> tuple[dict[str, int], int]:
            sizes = tx.state.sizes_of("run-1", [n for n, _ in after])
            return sizes, tx.state.write_many("run-1", after, sizes)

        sizes, delta = await store.run(with_sizes)
        assert sizes == {"a": 4, "gone": 5, "m/k1": 3}, name
        assert delta == -2 - 5 + 3, name
        assert await store.read(lambda tx: _all(tx, "run-1")) == {"a": b"12", "m/k1": b"mmmmmm"}
        await store.close()
