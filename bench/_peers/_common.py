"""What every peer script shares: its arguments and its one result line.

A peer script runs in the peers' virtual environment (see ``bench/peers.py``), never in the
repository's, and ends with::

    peer name=NAME p50_ms=... p95_ms=... wall_ms=... steps=S durability=...

``p50_ms`` / ``p95_ms`` are taken over the intervals between consecutive step completions
seen by the workflow code (S steps give S - 1 intervals); ``wall_ms`` is the caller's wall
clock for the whole workflow (start to result) divided by S.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}  # PRAGMA synchronous values


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--steps", type=int, default=300, help="no-op steps in the chain")
    parser.add_argument("--warmup", type=int, default=50, help="steps of the warm-up chain")
    parser.add_argument("--workdir", type=Path, required=True, help="a fresh directory")
    parser.add_argument("--database-url", default=None, help="PostgreSQL server (admin URL)")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the figures are intervals between steps)")
    return args


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def intervals_ms(marks: list[float]) -> list[float]:
    """Milliseconds between consecutive ``time.perf_counter()`` marks."""
    return [(b - a) * 1000.0 for a, b in zip(marks, marks[1:], strict=False)]


def report(name: str, marks: list[float], wall_s: float, steps: int, durability: str) -> None:
    if len(marks) != steps:
        raise SystemExit(f"{name}: expected {steps} step completions, saw {len(marks)}")
    gaps = intervals_ms(marks)
    print(
        f"peer name={name} p50_ms={statistics.median(gaps):.3f} "
        f"p95_ms={percentile(gaps, 0.95):.3f} wall_ms={wall_s * 1000.0 / steps:.3f} "
        f"steps={steps} durability={durability}",
        flush=True,
    )
