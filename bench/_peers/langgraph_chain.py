"""LangGraph: one node that loops S times, the sync SQLite checkpointer, fsync on.

Run by ``bench/peers.py`` in the peers' environment. Every super-step (one run of the node)
ends with a checkpoint; ``durability="sync"`` makes the graph wait for that checkpoint to be
committed before the next super-step starts. ``SqliteSaver.setup()`` switches the file to
WAL; the connection is set to ``synchronous=FULL`` (fsync of the WAL on every commit) and
the value is read back and reported.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, TypedDict

from _common import SYNCHRONOUS, parse_args, report
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph

MARKS: list[float] = []  # outside the graph state, so checkpoints stay the same size


class Chain(TypedDict):
    i: int
    n: int


def step(state: Chain) -> dict[str, int]:
    MARKS.append(time.perf_counter())
    return {"i": state["i"] + 1}


def more(state: Chain) -> str:
    return END if state["i"] >= state["n"] else "step"


def main() -> None:
    args = parse_args("LangGraph sync SQLite chain")
    conn = sqlite3.connect(str(args.workdir / "langgraph.sqlite3"), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    conn.execute("PRAGMA synchronous=FULL")
    journal = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = SYNCHRONOUS[conn.execute("PRAGMA synchronous").fetchone()[0]]
    builder = StateGraph(Chain)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", more, ["step", END])
    graph = builder.compile(checkpointer=saver)

    def run(thread: str, n: int) -> float:
        MARKS.clear()
        config: Any = {"configurable": {"thread_id": thread}, "recursion_limit": n + 10}
        started = time.perf_counter()
        out = graph.invoke({"i": 0, "n": n}, config, durability="sync")
        wall = time.perf_counter() - started
        if out["i"] != n:
            raise SystemExit(f"langgraph: the chain ended at {out['i']} of {n}")
        return wall

    run("warmup", args.warmup)
    wall = run("chain", args.steps)
    report("langgraph", list(MARKS), wall, args.steps, f"sqlite-{journal}-synchronous={sync}")


if __name__ == "__main__":
    main()
