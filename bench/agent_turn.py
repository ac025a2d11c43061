"""Engine overhead of one agent turn, at 0 and at 1,000 prior messages.

    uv run python bench/agent_turn.py [--sessions 15] [--turns 15] [--prior 1000]

One turn = one model call that asks for three tools, three parallel tool Steps, and a
second model call that answers. Model and tools are instant (a scripted model), so the
time from ``send_user_message`` until the ``turn_completed`` event arrives on the
AgentEvents Stream is engine overhead: RPC, Step dispatch, commits, state loading,
Stream delivery. Server (``dexcli dev``, SQLite, fsync on) and Worker run as separate
processes, like in production.

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
    """One benchmark session with its live event iterator."""

    def __init__(self, sessions: AgentSessionClient, session_id: str) -> None:
        self.sessions = sessions
        self.session_id = session_id
        self.events: AsyncIterator[AgentEvent] | None = None
        self.turns = 0

    async def start(self) -> None:
        await self.sessions.start_session(self.session_id)
        await wait_for_agent_snapshot(
            self.sessions,
            self.session_id,
            lambda snapshot: snapshot.state is not None,
            description="the session start",
        )
        self.events = aiter(self.sessions.follow_events(self.session_id))

    async def turn(self) -> float:
        """Run one turn; return its wall time in milliseconds."""
        assert self.events is not None
        self.turns += 1
        turn_id = f"turn-{self.turns}"
        started = time.perf_counter()
        accepted = await self.sessions.send_user_message(self.session_id, f"go {self.turns}")
        if not accepted:
            raise RuntimeError("send_user_message was refused")
        while True:
            event = await asyncio.wait_for(anext(self.events), timeout=30)
            if event.turn_id != turn_id:
                continue
            if event.type is AgentEventType.TURN_COMPLETED:
                return (time.perf_counter() - started) * 1000
            if event.type is AgentEventType.TURN_FAILED:
                raise RuntimeError(f"{turn_id} failed: {event.data}")


async def message_count(session: Session) -> int:
    snapshot = await session.sessions.get_agent_snapshot(session.session_id)
    return snapshot.state.message_count if snapshot.state is not None else 0


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
        warm = Session(sessions, "warm-up")
        await warm.start()
        for _ in range(3):
            await warm.turn()

        fresh: list[float] = []
        for n in range(args.sessions):
            session = Session(sessions, f"fresh-{n}")
            await session.start()
            fresh.append(await session.turn())

        long = Session(sessions, "long")
        await long.start()
        padding_started = time.perf_counter()
        while await message_count(long) < args.prior:
            await long.turn()
        prior = await message_count(long)
        padding_s = time.perf_counter() - padding_started
        loaded = [await long.turn() for _ in range(args.turns)]

    zero = statistics.median(fresh)
    thousand = statistics.median(loaded)
    print(
        f"fresh sessions: n={len(fresh)} median={zero:.1f}ms min={min(fresh):.1f}ms "
        f"max={max(fresh):.1f}ms"
    )
    print(
        f"long session: {prior} prior messages (built in {padding_s:.1f}s), n={len(loaded)} "
        f"median={thousand:.1f}ms min={min(loaded):.1f}ms max={max(loaded):.1f}ms"
    )
    return (
        f"agent_turn overhead_ms_0={zero:.1f} overhead_ms_1000={thousand:.1f} "
        f"ratio={thousand / zero:.2f} prior_messages={prior} fsync=on store=sqlite"
    )


def main() -> None:
    if os.environ.get(ROLE_ENV) == "worker":
        run_agent_worker([build_flow()])
        return
    parser = argparse.ArgumentParser(description="Engine overhead of one agent turn.")
    parser.add_argument("--sessions", type=int, default=15, help="fresh sessions (default 15)")
    parser.add_argument("--turns", type=int, default=15, help="turns at --prior (default 15)")
    parser.add_argument("--prior", type=int, default=1000, help="prior messages (default 1000)")
    args = parser.parse_args()
    line = asyncio.run(bench(args))
    print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
