"""Instructions per agent turn: a cost figure that repeats between runs, counted by valgrind.

    uv run python bench/agent_turn_ir.py [--turns 20] [--sessions 5]

Wall and CPU time of a turn swing by ±30 % from run to run on a shared 2-core machine, so
a change of a few percent cannot be seen in them. This bench counts instructions instead
(``valgrind --tool=callgrind``), which repeat to within a fraction of a percent. It runs
the turn of ``bench/agent_turn.py`` (a model call asking for three tools, the three tool
Steps, a second model call) in one process: an embedded server on SQLite (fsync on), the
agent Worker linked in-process, and the Client sending each ``send_user_message`` over
HTTP; each turn is awaited on the server's own commit of the Step that follows it (no
polling, so no request of the bench's own lands in the count). Everything the turn costs
in the engine is counted: the client's request, the server's HTTP, RPC, Step and store
work, SQLite, and the Worker's handlers; the in-process link replaces the WebSocket, so
the WebSocket layers are not in it.

The count repeats from run to run within a sitting, but not between sittings: the same
build counted 13.0 M instructions per turn in one sitting and 14.9 M in another, on
development machines of the same kind (``bench/step_ir.py``: 450 k and 524 k per Step),
and one machine has switched between the two figures. Compare builds in alternating runs
of one sitting (``bench/compare.py`` does).

The process runs twice, once with ``--sessions`` turns and once with ``--sessions +
--turns`` turns (after the same start-up); the difference divided by ``--turns`` is the
figure, so start-up and imports cancel out. Needs ``valgrind`` on the PATH (Debian's
package); each run takes a minute or two. The last line is::

    agent_turn_ir instructions_per_turn=... turns=... sessions=...

``bench/compare.py --a A --b B -- bench/agent_turn_ir.py`` gives the ratio of two builds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _callgrind

HERE = Path(__file__).resolve().parent
ROLE_ENV = "AGENT_TURN_IR_TURNS"


async def run_turns(sessions: int, turns: int) -> None:
    """The counted process: start ``sessions`` sessions, then run ``turns`` turns in turn."""
    import logging

    sys.path.insert(0, str(HERE))
    import agent_turn
    from dex import (
        AsyncClient,
        AsyncWorker,
        ClientOptions,
        PullWorkerOptions,
        Registry,
        WorkerOptions,
    )
    from dex_agents import AgentSessionClient
    from dex_server.app import ServerConfig
    from dex_server.embedded import EmbeddedServer
    from dex_server.service import _runtime, _steps
    from dex_server.service._common import Effects

    logging.disable(logging.INFO)
    waiting: dict[str, asyncio.Event] = {}
    recorded: list[str] = []
    apply = _runtime.Runtime.apply
    append_history = _steps.append_history  # type: ignore[attr-defined]

    def appended(tx: Any, flow: Any, type_: str, payload: bytes, now: float) -> None:
        append_history(tx, flow, type_, payload, now)
        # a session's turn is over once its next wait for a user message is recorded
        # (a wait_for task of its own, or inline in the turn's last commit)
        if type_ == "StepWaitForCompleted" and b'"stepType":"AwaitUserMessage"' in payload:
            recorded.append(flow.flow_id)

    def applied(self: _runtime.Runtime, eff: Effects) -> None:
        apply(self, eff)
        while recorded:  # the job that recorded it has committed
            event = waiting.get(recorded.pop())
            if event is not None:
                event.set()

    _runtime.Runtime.apply = applied  # type: ignore[method-assign]
    _steps.append_history = appended  # type: ignore[attr-defined]
    flow = agent_turn.build_flow()
    registry = Registry([flow], allow_async_handlers=True)
    workdir = Path(tempfile.mkdtemp(prefix="dex-turn-ir-"))
    config = ServerConfig(database_path=workdir / "bench.sqlite3", port=0)
    try:
        async with EmbeddedServer(config=config, name="turn-ir") as server:
            options = WorkerOptions(
                server_address=server.worker_address,
                pull=PullWorkerOptions(max_concurrent_tasks=32),
            )
            worker = AsyncWorker(registry, None, options)
            serving = asyncio.create_task(worker.start())
            await worker.wait_pull_registered(600)
            client = AsyncClient(registry, None, ClientOptions(server_address=server.address))
            agents = AgentSessionClient(client, flow)
            ids = [f"s{n}" for n in range(sessions)]

            async def until_waiting(session_id: str, send: str | None) -> None:
                waiting[session_id] = asyncio.Event()
                if send is None:
                    await agents.start_session(session_id)
                else:
                    await agents.send_user_message(session_id, send)
                await asyncio.wait_for(waiting[session_id].wait(), 600)

            for session_id in ids:
                await until_waiting(session_id, None)
            for n in range(turns):
                await until_waiting(ids[n % sessions], f"go {n}")
            await client.close()
            await worker.stop()
            await serving
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def count(sessions: int, turns: int, workdir: Path) -> int:
    """Instructions of one counted process running ``turns`` turns."""
    out = workdir / f"callgrind.{turns}.out"
    env = _callgrind.environment({**os.environ, ROLE_ENV: f"{sessions},{turns}"})
    cmd = _callgrind.command(out, str(Path(__file__).resolve()))
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"the counted run failed:\n{done.stderr[-3000:]}")
    return _callgrind.totals(out)


def main() -> None:
    role = os.environ.get(ROLE_ENV)
    if role is not None:
        sessions, turns = (int(x) for x in role.split(","))
        try:  # the loop the server runs on
            import uvloop
        except ImportError:
            asyncio.run(run_turns(sessions, turns))
        else:
            uvloop.run(run_turns(sessions, turns))
        return
    parser = argparse.ArgumentParser(description="Instructions per agent turn (valgrind).")
    parser.add_argument("--turns", type=int, default=20, help="turns counted (default 20)")
    parser.add_argument(
        "--sessions", type=int, default=5, help="sessions, one warm-up turn each (default 5)"
    )
    args = parser.parse_args()
    with _callgrind.workdir("dex-turn-ir-") as workdir:
        base = count(args.sessions, args.sessions, workdir)
        more = count(args.sessions, args.sessions + args.turns, workdir)
    per_turn = (more - base) / args.turns
    print(f"{args.turns} turns cost {more - base:,} instructions beyond the warm-up")
    print(
        f"agent_turn_ir instructions_per_turn={per_turn:.0f} turns={args.turns}"
        f" sessions={args.sessions}"
    )


if __name__ == "__main__":
    main()
