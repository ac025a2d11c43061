"""Engine overhead of one agent turn, at 0 and at 1,000 prior messages.

    uv run python bench/agent_turn.py [--sessions 15] [--turns 15] [--prior 1000]

One turn = one model call that asks for three tools, three parallel tool Steps, and a
second model call that answers. Model and tools are instant (a scripted model), so the
time from ``send_user_message`` until the ``turn_completed`` event arrives on the
AgentEvents Stream is engine overhead: RPC, Step dispatch, commits, state loading,
Stream delivery. Server (``dexcli dev``, SQLite, fsync on) and Worker run as separate
processes, like in production. ``--no-fsync`` runs the server with env
``DEX_SERVER_FSYNC=0`` (SQLite ``synchronous=NORMAL``): the engine without the disk's
flush latency, which on a shared disk is noisy and dominates the figures.

* ``overhead_ms_0``: median over the first turns of fresh sessions (no prior messages).
* ``overhead_ms_1000``: median over turns of one session that already holds at least
  ``--prior`` messages (built by running the same turn until it gets there).

The last line is ``agent_turn overhead_ms_0=... overhead_ms_1000=... ratio=...``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
from dex._protocol import HistoryEventWire
from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
)
from dex_agents.testing import (
    AgentTestStack,
    ScriptedModel,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    run_agent_worker,
    wait_for_agent_snapshot,
)

ROLE_ENV = "AGENT_TURN_BENCH_ROLE"
HERE = Path(__file__).resolve().parent


def noop(index: int) -> str:
    return f"ok {index}"


def build_flow() -> AgentSessionFlow:
    calls = [ScriptedToolCall(tool_name="noop", arguments={"index": i}) for i in range(3)]
    model = ScriptedModel(
        default=lambda call: (
            ScriptedToolCalls(calls=calls) if call.call_index == 0 else ScriptedText(text="done")
        )
    )
    return AgentSessionFlow(
        ScriptedRunner(model, {"noop": noop}),
        flow_type="AgentTurnBench",
        options=AgentSessionOptions(tool_policies={"noop": ToolPolicy(ToolEffect.READ)}),
    )


class Session:
    """One benchmark session with its live event iterator and history cursor."""

    def __init__(self, stack: AgentTestStack, sessions: AgentSessionClient, session_id: str):
        self.stack = stack
        self.sessions = sessions
        self.session_id = session_id
        self.events: AsyncIterator[AgentEvent] | None = None
        self.turns = 0
        self.last_event_id = 0

    async def start(self) -> None:
        await self.sessions.start_session(self.session_id)
        await wait_for_agent_snapshot(
            self.sessions,
            self.session_id,
            lambda snapshot: snapshot.state is not None,
            description="the session start",
        )
        self.events = aiter(self.sessions.follow_events(self.session_id))

    async def turn(self) -> tuple[float, float]:
        """Run one turn; return (engine ms, observed ms).

        Engine: from just before ``send_user_message`` until the server committed the
        turn's last RunModel (its history event time; same machine, same clock).
        Observed: until this client read ``turn_completed`` from the AgentEvents Stream.
        """
        assert self.events is not None
        self.turns += 1
        turn_id = f"turn-{self.turns}"
        wall_started = time.time()
        started = time.perf_counter()
        accepted = await self.sessions.send_user_message(self.session_id, f"go {self.turns}")
        if not accepted:
            raise RuntimeError("send_user_message was refused")
        while True:
            event = await asyncio.wait_for(anext(self.events), timeout=30)
            if event.turn_id != turn_id:
                continue
            if event.type is AgentEventType.TURN_COMPLETED:
                observed = (time.perf_counter() - started) * 1000
                break
            if event.type is AgentEventType.TURN_FAILED:
                raise RuntimeError(f"{turn_id} failed: {event.data}")
        committed = await self.last_run_model_commit(wall_started)
        return (committed - wall_started) * 1000, observed

    async def new_history(self) -> list[HistoryEventWire]:
        events: list[HistoryEventWire] = []
        while True:
            page = await self.stack.client.get_history(
                self.session_id, page_size=1000, page_token=str(self.last_event_id)
            )
            events.extend(page.events)
            if page.events:
                self.last_event_id = page.events[-1].event_id
            if not page.next_page_token:
                return events

    async def last_run_model_commit(self, since: float) -> float:
        # turn_completed is streamed just before RunModel's result commits: wait for the
        # commit, then take the time of the turn's last RunModel from history.
        await wait_for_agent_snapshot(
            self.sessions,
            self.session_id,
            lambda snapshot: (
                snapshot.state is not None
                and snapshot.state.turn_count == self.turns
                and snapshot.state.active_turn_id is None
            ),
            description="the end of the turn",
        )
        times: list[float] = [
            event.event_time
            for event in await self.new_history()
            if event.type == "StepExecuteCompleted"
            and event.event_time >= since
            and msgspec.json.decode(event.payload).get("context", {}).get("stepType") == "RunModel"
        ]
        return max(times)


async def breakdown(stack: AgentTestStack, session: Session) -> None:
    """Print when each history event of one more turn committed, relative to its start."""
    await session.new_history()
    first = session.last_event_id
    started = time.time()
    engine, observed = await session.turn()
    history = await stack.client.get_history(
        session.session_id, page_size=1000, page_token=str(first)
    )
    print(
        f"breakdown of one turn (engine {engine:.1f}ms, "
        f"turn_completed read from the Stream after {observed:.1f}ms):"
    )
    previous = started
    for event in history.events:
        if event.event_time < started:
            continue
        payload = msgspec.json.decode(event.payload)
        context = payload.get("context", {}) if isinstance(payload, dict) else {}
        name = context.get("stepExecutionId") or (
            payload.get("rpcName", "") if isinstance(payload, dict) else ""
        )
        duration = context.get("duration")
        ran = f" (handler attempt {float(duration) * 1000:.1f}ms)" if duration else ""
        print(
            f"  {(event.event_time - started) * 1000:7.1f}ms "
            f"+{(event.event_time - previous) * 1000:5.1f}ms {event.type} {name}{ran}"
        )
        previous = event.event_time


async def message_count(session: Session) -> int:
    snapshot = await session.sessions.get_agent_snapshot(session.session_id)
    return snapshot.state.message_count if snapshot.state is not None else 0


def summary(label: str, results: list[tuple[float, float]]) -> tuple[float, float]:
    engine = statistics.median(r[0] for r in results)
    observed = statistics.median(r[1] for r in results)
    low, high = min(r[0] for r in results), max(r[0] for r in results)
    print(
        f"{label}: n={len(results)} engine median={engine:.1f}ms (min {low:.1f}, max "
        f"{high:.1f}); turn_completed read from the Stream after {observed:.1f}ms (median)"
    )
    return engine, observed


async def bench(args: argparse.Namespace) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="dex-agent-turn-"))
    flow = build_flow()
    env = {ROLE_ENV: "worker"}
    async with AgentTestStack(
        workdir, [flow], "agent_turn", worker_cwd=HERE, worker_env=env
    ) as stack:
        await stack.start_worker()
        sessions = stack.sessions(flow)

        # Warm up (imports, connection pools, SQLite pages).
        warm = Session(stack, sessions, "warm-up")
        await warm.start()
        for _ in range(3):
            await warm.turn()

        fresh: list[tuple[float, float]] = []
        for n in range(args.sessions):
            session = Session(stack, sessions, f"fresh-{n}")
            await session.start()
            fresh.append(await session.turn())

        long = Session(stack, sessions, "long")
        await long.start()
        padding_started = time.perf_counter()
        while await message_count(long) < args.prior:
            await long.turn()
        prior = await message_count(long)
        padding_s = time.perf_counter() - padding_started
        loaded = [await long.turn() for _ in range(args.turns)]
        if args.breakdown:
            await breakdown(stack, long)

    zero, _ = summary("0 prior messages", fresh)
    thousand, _ = summary(f"{prior} prior messages (built in {padding_s:.1f}s)", loaded)
    return (
        f"agent_turn overhead_ms_0={zero:.1f} overhead_ms_1000={thousand:.1f} "
        f"ratio={thousand / zero:.2f} prior_messages={prior} "
        f"fsync={'off' if args.no_fsync else 'on'} store=sqlite"
    )


def main() -> None:
    if os.environ.get(ROLE_ENV) == "worker":
        run_agent_worker([build_flow()])
        return
    parser = argparse.ArgumentParser(description="Engine overhead of one agent turn.")
    parser.add_argument("--sessions", type=int, default=15, help="fresh sessions (default 15)")
    parser.add_argument("--turns", type=int, default=15, help="turns at --prior (default 15)")
    parser.add_argument("--prior", type=int, default=1000, help="prior messages (default 1000)")
    parser.add_argument(
        "--breakdown", action="store_true", help="print the Step timeline of one more turn"
    )
    parser.add_argument(
        "--no-fsync", action="store_true", help="run the server without fsync (DEX_SERVER_FSYNC=0)"
    )
    args = parser.parse_args()
    if args.no_fsync:
        os.environ["DEX_SERVER_FSYNC"] = "0"  # the server child inherits it
    line = asyncio.run(bench(args))
    print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
