"""Per-call cost of loading a small AttributeMap from a run that also holds a big one.

    uv run python bench/map_loads.py [--rows 5000] [--calls 2000]

An agent session keeps its messages in one map (``--rows`` instances) and its tool calls in
another (a few); a Step that loads the tool calls should pay for those, not for the
messages. This writes both into an SQLite file through the store's own ``SqliteState`` and
times ``of_maps(run, ["Calls"])``. The last line is::

    map_loads rows=5000 small_map_ms=... big_map_ms=... store=sqlite
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from pathlib import Path

import msgspec
from dex_server.store import StoredValue
from dex_server.store.sqlite import apply_migrations
from dex_server.store.sqlite._repos import SqliteState


def _stored(data: object) -> StoredValue:
    raw = msgspec.json.encode(data)
    return StoredValue(value=msgspec.Raw(raw), blob=None, size=len(raw))


def per_call_ms(state: SqliteState, maps: list[str], calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        state.of_maps("run-1", maps)
    return (time.perf_counter() - started) * 1000.0 / calls


def main() -> None:
    parser = argparse.ArgumentParser(description="Dex map load benchmark")
    parser.add_argument("--rows", type=int, default=5000, help="instances of the big map")
    parser.add_argument("--calls", type=int, default=2000, help="timed calls per figure")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dex-bench-") as tmp:
        conn = sqlite3.connect(Path(tmp) / "db", isolation_level=None)
        apply_migrations(conn)
        state = SqliteState(conn)
        conn.execute("BEGIN")
        for k in range(args.rows):
            state.write("run-1", f"Messages/{k:08}", _stored({"role": "user", "text": "x" * 200}))
        for k in range(4):
            state.write("run-1", f"Calls/{k}", _stored({"tool": "t", "args": k}))
        state.write("run-1", "Status", _stored("idle"))
        conn.execute("COMMIT")
        if len(state.of_maps("run-1", ["Calls"])) != 4:
            raise SystemExit("of_maps returned the wrong rows")
        small = per_call_ms(state, ["Calls"], args.calls)
        big = per_call_ms(state, ["Messages"], max(1, args.calls // 50))
        conn.close()
    print(f"map_loads rows={args.rows} small_map_ms={small:.4f} big_map_ms={big:.3f} store=sqlite")


if __name__ == "__main__":
    main()
