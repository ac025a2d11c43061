"""Flow search latency at 10k, 100k and 1M Flows, on SQLite and on PostgreSQL.

    uv run python bench/search.py [--sizes 10000,100000,1000000] [--stores sqlite,postgres]
                                  [--queries 200] [--page-size 20]
                                  [--postgres-url postgresql://postgres@127.0.0.1:5432/postgres]

Rows are seeded straight through the store's bulk path (``tx.search.seed_flows`` and
``put_many``), not by running Flows: each Flow gets a KEYWORD ``Status`` (one of 20
values, so an equality matches 5% of the Flows) and an INT ``Amount`` (uniform in
0..999,999). Each size adds Flows to the previous one. A measured search is the server's
own search job (parse, type-check, SQL, hydrating the page's indexed values) run on the
store's read path, as ``GET /v1/flows?query=`` runs it, minus HTTP:

* ``kw``: ``Status = 's<k>'`` (newest first), one page.
* ``range``: ``Amount >= <a> AND Amount < <a + 500000> ORDER BY Amount DESC``, one page.

PostgreSQL runs on a fresh database ``dex_bench_search_<random>`` (dropped afterwards),
after ``ANALYZE``; SQLite in a temporary folder. Progress goes to stderr; the last line is
``search <store>_<size>_<query>_p50_ms=... <store>_<size>_<query>_p95_ms=... ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from dex._protocol import FlowSpec, StateDecl, StepSpec
from dex_server.engine.search import IndexRow
from dex_server.service._search import search_flows
from dex_server.store import FlowRecord, SqliteStore, Store, Tx

SPEC = FlowSpec(
    flow_type="BenchOrder",
    start_step="Go",
    steps=[StepSpec(step_type="Go")],
    state=[
        StateDecl(name="status", kind="attribute", index_type="keyword", index_key="Status"),
        StateDecl(name="Amount", kind="attribute", index_type="int"),
    ],
)
CHUNK = 20_000


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _seed_chunk(tx: Tx, start: int, end: int, rng: random.Random) -> None:
    flows, rows = [], []
    t0 = 1_700_000_000.0
    for n in range(start, end):
        run = f"{n:012d}-{uuid.UUID(int=rng.getrandbits(128)).hex[:20]}"
        flows.append(
            FlowRecord(
                run_id=run,
                flow_id=f"order-{n}",
                flow_type="BenchOrder",
                status="completed" if n % 3 else "running",
                started_at=t0 + n,
                closed_at=None if n % 3 == 0 else t0 + n + 1,
            )
        )
        rows.append((run, "Status", "keyword", IndexRow(0, kw=f"s{rng.randrange(20)}")))
        rows.append((run, "Amount", "int", IndexRow(0, i=rng.randrange(1_000_000))))
    tx.search.seed_flows(flows)
    tx.search.put_many(rows)


async def seed(store: Store, start: int, end: int, rng: random.Random) -> None:
    t = time.monotonic()
    for lo in range(start, end, CHUNK):
        hi = min(end, lo + CHUNK)
        await store.run(lambda tx, lo=lo, hi=hi: _seed_chunk(tx, lo, hi, rng))  # type: ignore[misc]
        if (hi - start) % 100_000 == 0 or hi == end:
            rate = (hi - start) / max(time.monotonic() - t, 1e-9)
            log(f"  seeded {hi:,} Flows ({rate:,.0f}/s)")


async def measure(store: Store, n: int, page: int, rng: random.Random) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"kw": [], "range": []}
    for i in range(n):
        kind = "kw" if i % 2 == 0 else "range"
        if kind == "kw":
            query = f"Status = 's{rng.randrange(20)}'"
        else:
            a = rng.randrange(500_000)
            query = f"Amount >= {a} AND Amount < {a + 500_000} ORDER BY Amount DESC"
        t = time.perf_counter()
        res = await store.read(lambda tx, q=query: search_flows(tx, q, page, "", False))  # type: ignore[misc]
        out[kind].append((time.perf_counter() - t) * 1000)
        assert len(res.flows) == page, (query, len(res.flows))
    return out


def pct(xs: list[float], p: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(p) - 1]


async def run_store(kind: str, store: Store, args: Any, figures: dict[str, float]) -> None:
    store.open()
    try:
        await store.run(lambda tx: tx.specs.put("bench-v1", SPEC, time.time()))
        rng = random.Random(7)
        have = 0
        for size in args.sizes:
            log(f"{kind}: seeding to {size:,} Flows")
            await seed(store, have, size, rng)
            have = size
            if kind == "postgres":
                await store.run(lambda tx: tx.search.c.execute("ANALYZE"))
            else:
                await store.run(lambda tx: tx.search.c.execute("ANALYZE"))
            await measure(store, 20, args.page_size, rng)  # warm the caches
            res = await measure(store, args.queries, args.page_size, rng)
            label = f"{size // 1000}k" if size < 1_000_000 else f"{size // 1_000_000}m"
            for q, xs in res.items():
                p50, p95 = pct(xs, 50), pct(xs, 95)
                figures[f"{kind}_{label}_{q}_p50_ms"] = p50
                figures[f"{kind}_{label}_{q}_p95_ms"] = p95
                log(f"  {kind} {size:,} {q}: p50 {p50:.2f} ms, p95 {p95:.2f} ms")
    finally:
        await store.close()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--stores", default="sqlite,postgres")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--page-size", type=int, default=20)
    ap.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = ap.parse_args()
    args.sizes = sorted(int(s) for s in args.sizes.split(","))
    figures: dict[str, float] = {}
    for kind in args.stores.split(","):
        if kind == "sqlite":
            with tempfile.TemporaryDirectory() as d:
                await run_store(kind, SqliteStore(Path(d) / "db", fsync=False), args, figures)
        elif kind == "postgres":
            from dex_server.store.postgres import PostgresStore

            name = f"dex_bench_search_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(args.postgres_url, autocommit=True) as admin:
                admin.execute(f"CREATE DATABASE {name}")
            base = args.postgres_url.rsplit("/", 1)[0]
            try:
                await run_store(kind, PostgresStore(f"{base}/{name}", fsync=False), args, figures)
            finally:
                with psycopg.connect(args.postgres_url, autocommit=True) as admin:
                    admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        else:
            raise SystemExit(f"unknown store {kind!r}")
    print("search " + " ".join(f"{k}={v:.2f}" for k, v in figures.items()))


if __name__ == "__main__":
    asyncio.run(main())
