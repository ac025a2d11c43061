"""Engine overhead of one agent turn, at 0 and at 1,000 prior messages.

    uv run python bench/agent_turn.py [--sessions 15] [--turns 15] [--prior 1000]
                                       [--breakdown] [--no-fsync] [--in-process]
                                       [--follow] [--interleave] [--unix] [--postgres]

One turn = one model call that asks for three tools, three parallel tool Steps, and a
second model call that answers. Model and tools are instant (a scripted model), so the
time from just before ``send_user_message`` until the server applied the turn's last
RunModel result (its history event time; same machine, same clock; that transaction's own
fsync is not included) is engine overhead: RPC, Step dispatch, commits, state loading.
Server (``dexcli dev``, SQLite, fsync on) and Worker run as separate processes, like in
production. ``--no-fsync`` runs the server with env ``DEX_SERVER_FSYNC=0`` (SQLite
``synchronous=NORMAL``): the engine without the disk's flush latency, which on a shared
disk is noisy and dominates the figures.

``--in-process`` runs the server as a ``dex_server.embedded.EmbeddedServer`` (SQLite, the
same fsync setting) with the agent Worker (an ``AsyncWorker``, ``server_address`` =
``server.worker_address``, so the in-memory ``inproc://`` link instead of a WebSocket) in
one child process: the application an embedding user would run. The bench's client stays
in this process and talks HTTP to the child, as in the separate mode. It is not put on the
child's loop: its requests (the start, the snapshot checks, the history and Stream reads)
would then run on the loop that serves the turn, and their CPU would be counted as the
engine's, which would hide how much cheaper the link is; a client in another process is
also what a UI or a ``dexcli`` of such an application is. The CPU figures are then those
of that one process: ``server_cpu_ms`` is server and Worker together, ``worker_cpu_ms`` is
0. The child runs on uvloop when it is installed, the loop the separate server runs on
(``bench/step_overhead.py --in-process`` does the same); the separate Worker runs on
asyncio's own loop, so the in-process Worker code gets the faster loop too. (On asyncio's
loop the embedded server's HTTP answers of this build wait about 40 ms each for the
client's delayed ACK, its accepted sockets lacking ``TCP_NODELAY``: that slows the bench's
own reads ten-fold, not the measured turn.) A build without ``dex_server.embedded`` cannot
run this mode and stops with a message.

``--follow`` measures the turns of a watched session instead: the client follows the
AgentEvents Stream during each turn (as a UI or ``dexcli`` does) and the CPU figures run
from the send to reading ``turn_completed``, so they include serving the follower's reads.

Without it, while a measured turn runs the client stays quiet: it neither follows the AgentEvents
Stream nor polls snapshots (each would be an HTTP request, and an RPC on the Worker,
competing with the turn for the same CPUs). It sleeps until the turn must be over, then
checks the snapshot and reads the commit times from history, and afterwards reads the
turn's events from the Stream to check that ``turn_completed`` was written.

* ``overhead_ms_0``: median over the first turns of fresh sessions (no prior messages).
* ``overhead_ms_1000``: median over turns of one session that already holds at least
  ``--prior`` messages (built by running the same turn until it gets there).
* ``cpu/turn``: CPU time the server and the Worker process each used per measured turn (all
  threads, ``/proc/<pid>/task/*/schedstat``); a busy machine inflates it less than wall
  time, so it shows an engine change more reliably.

By default the fresh sessions' turns run first and the long session is built and measured
after them, so the two medians come from different minutes of the machine, and on a shared
machine their ratio moves by a fifth from run to run. ``--interleave`` builds the long
session first and then alternates a fresh session's first turn with a turn of the long
one, so both medians come from the same stretch of time and the same store (its file
already holding the long session's history).

``--unix`` has the Worker connect over the server's Unix socket (``dexcli dev
--unix-socket``, ``AgentTestStack(unix_socket=True)``) instead of TCP; the bench's client
stays on TCP.

``--postgres`` runs the separate server on PostgreSQL instead of SQLite: a fresh database
``dex_test_<random>`` on ``DEX_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``), dropped at the end, as the suites'
``DEX_TEST_DATABASE=postgres`` runs do. ``server_cpu_ms`` is then the server process's
CPU only, not the database's. The fsync setting is SQLite's, so ``--no-fsync`` and
``--in-process`` (an embedded server on SQLite) do not go with it.

The last line is ``agent_turn overhead_ms_0=... overhead_ms_1000=... ratio=...
server_cpu_ms=... worker_cpu_ms=... prior_messages=... fsync=on|off store=sqlite|postgres
mode=separate|inproc follow=on|off order=sequential|interleaved link=tcp|unix|inproc``
(CPU per turn of fresh sessions).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import TracebackType
from typing import Protocol

import msgspec
from dex import (
    AsyncClient,
    AsyncWorker,
    ClientOptions,
    PullWorkerOptions,
    Registry,
    WorkerOptions,
)
from dex._protocol import HistoryEventWire
from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentSessionClient,
    AgentSessionFlow,
    AgentSessionOptions,
    AgentUsage,
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
from dex_agents.testing._process import ChildProcess

ROLE_ENV = "AGENT_TURN_BENCH_ROLE"
EMBEDDED_DIR_ENV = "AGENT_TURN_BENCH_DIR"
# A quiet turn sleeps this long before it checks that the turn ended (a turn takes well
# under it even on a busy machine), then polls every QUIET_POLL_S.
QUIET_WAIT_S = 0.15
QUIET_POLL_S = 0.05
HERE = Path(__file__).resolve().parent


def noop(index: int) -> str:
    return f"ok {index}"


def build_flow() -> AgentSessionFlow:
    calls = [ScriptedToolCall(tool_name="noop", arguments={"index": i}) for i in range(3)]
    # A fixed usage keeps the scripted model instant: without it the model derives token
    # counts from every message of the session, a cost that grows with the history.
    usage = AgentUsage(requests=1, input_tokens=100, output_tokens=10, total_tokens=110)
    model = ScriptedModel(
        default=lambda call: (
            ScriptedToolCalls(calls=calls, usage=usage)
            if call.call_index == 0
            else ScriptedText(text="done", usage=usage)
        )
    )
    return AgentSessionFlow(
        ScriptedRunner(model, {"noop": noop}),
        flow_type="AgentTurnBench",
        options=AgentSessionOptions(tool_policies={"noop": ToolPolicy(ToolEffect.READ)}),
    )


class Stack(Protocol):
    """What the bench needs of a running server: its HTTP client."""

    @property
    def client(self) -> AsyncClient: ...


async def run_embedded(database: Path, ready_file: Path) -> None:
    """The ``--in-process`` child: an embedded server and the agent Worker, until SIGTERM."""
    import signal

    from dex_server.app import ServerConfig
    from dex_server.embedded import EmbeddedServer

    config = ServerConfig(database_path=database, port=0)  # fsync: env DEX_SERVER_FSYNC
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)
    async with EmbeddedServer(config=config, name="agent-turn") as server:
        # the options run_agent_worker gives the separate Worker (32 task slots)
        options = WorkerOptions(
            server_address=server.worker_address,
            pull=PullWorkerOptions(max_concurrent_tasks=32),
        )
        worker = AsyncWorker(Registry([build_flow()], allow_async_handlers=True), None, options)
        serving = asyncio.create_task(worker.start())
        await worker.wait_pull_registered(30)
        temporary = ready_file.with_suffix(".tmp")
        temporary.write_text(server.address)
        temporary.replace(ready_file)
        await stopping.wait()
        await worker.stop()
        await serving


class EmbeddedStack:
    """The ``--in-process`` child process and an HTTP client of it (see the docstring)."""

    def __init__(self, workdir: Path, flow: AgentSessionFlow) -> None:
        self.workdir = workdir
        self.flow = flow
        self.process: ChildProcess | None = None
        self._client: AsyncClient | None = None

    @property
    def client(self) -> AsyncClient:
        assert self._client is not None
        return self._client

    def sessions(self, flow: AgentSessionFlow) -> AgentSessionClient:
        return AgentSessionClient(self.client, flow)

    async def __aenter__(self) -> EmbeddedStack:
        ready = self.workdir / "embedded.ready"
        env = {**os.environ, ROLE_ENV: "embedded", EMBEDDED_DIR_ENV: str(self.workdir)}
        self.process = ChildProcess(
            [sys.executable, str(Path(__file__).resolve())],
            log_path=self.workdir / "embedded.log",
            env=env,
        )
        deadline = time.monotonic() + 60
        while not ready.exists():
            if not self.process.is_running() or time.monotonic() > deadline:
                await self.aclose()
                raise SystemExit(f"the embedded server did not start:\n{self.process.log_tail()}")
            await asyncio.sleep(0.02)
        registry = Registry([self.flow], allow_async_handlers=True)
        options = ClientOptions(server_address=ready.read_text().strip())
        self._client = AsyncClient(registry, None, options)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()
        if self.process is not None:
            await self.process.stop(timeout=10.0)


class Session:
    """One benchmark session with its live event iterator and history cursor."""

    def __init__(self, stack: Stack, sessions: AgentSessionClient, session_id: str):
        self.stack = stack
        self.sessions = sessions
        self.session_id = session_id
        self.events: AsyncIterator[AgentEvent] | None = None
        self.turns = 0
        self.last_event_id = 0
        self.cpu_s = [0.0, 0.0]
        self.cpu_turns = 0
        self.timelines: list[list[tuple[str, float]]] = []

    async def start(self) -> None:
        await self.sessions.start_session(self.session_id)
        await wait_for_agent_snapshot(
            self.sessions,
            self.session_id,
            lambda snapshot: snapshot.state is not None,
            description="the session start",
        )
        self.events = aiter(self.sessions.follow_events(self.session_id))

    async def turn(
        self, *, quiet: bool = True, pids: list[int] | None = None, follow: bool = False
    ) -> float:
        """Run one turn; return its engine ms (see the module docstring).

        ``quiet=False`` follows the Stream during the turn instead (faster when the
        figure is not needed, e.g. while building up prior messages). With ``pids``, the
        CPU seconds those processes used during the quiet wait (the turn and nothing
        else) are added to ``self.cpu_s`` (``self.cpu_turns`` counts them). ``follow``
        follows the Stream and counts the CPU from the send to ``turn_completed``.
        """
        assert self.events is not None
        self.turns += 1
        turn_id = f"turn-{self.turns}"
        cpu_before = cpu_seconds(pids) if pids else []
        wall_started = time.time()
        accepted = await self.sessions.send_user_message(self.session_id, f"go {self.turns}")
        if not accepted:
            raise RuntimeError("send_user_message was refused")
        if follow:
            await self.read_events_until_completed(turn_id)
            if pids:
                cpu_after = cpu_seconds(pids)
                for i, (before, after) in enumerate(zip(cpu_before, cpu_after, strict=True)):
                    self.cpu_s[i] += after - before
                self.cpu_turns += 1
            return (await self.last_run_model_commit(wall_started) - wall_started) * 1000
        if quiet:
            await asyncio.sleep(QUIET_WAIT_S)
            cpu_after = cpu_seconds(pids) if pids else []
            if await self.wait_turn_end() and pids:
                # the turn ended within the quiet wait
                for i, (before, after) in enumerate(zip(cpu_before, cpu_after, strict=True)):
                    self.cpu_s[i] += after - before
                self.cpu_turns += 1
        await self.read_events_until_completed(turn_id)
        return (await self.last_run_model_commit(wall_started) - wall_started) * 1000

    async def read_events_until_completed(self, turn_id: str) -> None:
        assert self.events is not None
        while True:
            event = await asyncio.wait_for(anext(self.events), timeout=30)
            if event.turn_id != turn_id:
                continue
            if event.type is AgentEventType.TURN_COMPLETED:
                return
            if event.type is AgentEventType.TURN_FAILED:
                raise RuntimeError(f"{turn_id} failed: {event.data}")

    async def wait_turn_end(self) -> bool:
        """Wait until the snapshot shows the turn ended; whether it had at the first look."""
        deadline = time.monotonic() + 30
        first = True
        while True:
            snapshot = await self.sessions.get_agent_snapshot(self.session_id)
            state = snapshot.state
            if state is not None and state.turn_count == self.turns and not state.active_turn_id:
                return first
            first = False
            if time.monotonic() > deadline:
                raise TimeoutError(f"turn {self.turns} of {self.session_id} did not end")
            await asyncio.sleep(QUIET_POLL_S)

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
        # commit, then take the time of the turn's last RunModel from history. Each
        # event's commit offset is kept for the per-event medians of --breakdown.
        await self.wait_turn_end()
        events = [event for event in await self.new_history() if event.event_time >= since]
        labels: dict[str, int] = {}
        timeline: list[tuple[str, float]] = []
        times: list[float] = []
        for event in events:
            payload = msgspec.json.decode(event.payload)
            context = payload.get("context", {}) if isinstance(payload, dict) else {}
            name = context.get("stepType") or (
                payload.get("rpcName", "") if isinstance(payload, dict) else ""
            )
            label = f"{event.type} {name}"
            labels[label] = labels.get(label, 0) + 1
            timeline.append((f"{label} #{labels[label]}", (event.event_time - since) * 1000))
            if event.type == "StepExecuteCompleted" and name == "RunModel":
                times.append(event.event_time)
        end = max(times)
        self.timelines.append([(label, ms) for label, ms in timeline if ms <= (end - since) * 1000])
        return end


def print_timeline_medians(label: str, timelines: list[list[tuple[str, float]]]) -> None:
    """Print the median commit offset of each event of a turn (same order as a turn)."""
    offsets: dict[str, list[float]] = {}
    for timeline in timelines:
        for name, ms in timeline:
            offsets.setdefault(name, []).append(ms)
    print(f"median commit offsets, {label} (n={len(timelines)}):")
    previous = 0.0
    for name, values in sorted(offsets.items(), key=lambda item: statistics.median(item[1])):
        median = statistics.median(values)
        print(f"  {median:7.1f}ms +{median - previous:5.1f}ms {name}")
        previous = median


async def breakdown(stack: Stack, session: Session) -> None:
    """Print when each history event of one more turn committed, relative to its start."""
    await session.new_history()
    first = session.last_event_id
    started = time.time()
    engine = await session.turn()
    history = await stack.client.get_history(
        session.session_id, page_size=1000, page_token=str(first)
    )
    print(f"breakdown of one turn (engine {engine:.1f}ms):")
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


def child_pids() -> list[int]:
    """The server and Worker processes (this process's children), server first."""
    me = str(os.getpid())
    pids: list[int] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            pids.append(int(entry))
    return sorted(pids, key=lambda pid: b"dexcli" not in Path(f"/proc/{pid}/cmdline").read_bytes())


def cpu_seconds(pids: list[int]) -> list[float]:
    """CPU seconds all threads of each process ran so far (schedstat, ns resolution)."""
    totals: list[float] = []
    for pid in pids:
        total = 0
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            threads = []
        for tid in threads:
            try:
                total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        totals.append(total / 1e9)
    return totals


def summary(label: str, results: list[float], cpu_s: list[float], turns: int) -> float:
    """Print one size's figures; return the median engine ms."""
    engine = statistics.median(results)
    quartiles = statistics.quantiles(results, n=4)
    print(
        f"{label}: n={len(results)} engine median={engine:.1f}ms (p25 {quartiles[0]:.1f}, "
        f"p75 {quartiles[2]:.1f}, min {min(results):.1f}, max {max(results):.1f}); "
        f"cpu/turn server {cpu_s[0] * 1000 / max(turns, 1):.1f}ms "
        f"Worker {cpu_s[1] * 1000 / max(turns, 1):.1f}ms"
    )
    return engine


async def bench(args: argparse.Namespace) -> str:
    workdir = Path(tempfile.mkdtemp(prefix="dex-agent-turn-"))
    flow = build_flow()
    stack: AgentTestStack | EmbeddedStack
    if args.in_process:
        stack = EmbeddedStack(workdir, flow)
    else:
        # only given when asked for: a build whose stack lacks the option still runs
        unix = {"unix_socket": True} if args.unix else {}
        stack = AgentTestStack(
            workdir, [flow], "agent_turn", worker_cwd=HERE, worker_env={ROLE_ENV: "worker"}, **unix
        )
    async with stack:
        if isinstance(stack, EmbeddedStack):
            assert stack.process is not None
            pids = [stack.process.pid, 0]  # one process; no Worker process (0: no CPU)
        else:
            await stack.start_worker()
            pids = child_pids()
        sessions = stack.sessions(flow)

        # Warm up (imports, connection pools, SQLite pages).
        warm = Session(stack, sessions, "warm-up")
        await warm.start()
        for _ in range(3):
            await warm.turn()

        fresh_sessions = [Session(stack, sessions, f"fresh-{n}") for n in range(args.sessions)]
        for session in fresh_sessions:
            await session.start()
        fresh: list[float] = []
        if not args.interleave:
            fresh = [await s.turn(pids=pids, follow=args.follow) for s in fresh_sessions]

        long = Session(stack, sessions, "long")
        await long.start()
        padding_started = time.perf_counter()
        while await message_count(long) < args.prior:
            await long.turn(quiet=False)
        prior = await message_count(long)
        padding_s = time.perf_counter() - padding_started
        long.cpu_s, long.cpu_turns, long.timelines = [0.0, 0.0], 0, []
        loaded: list[float] = []
        if args.interleave:
            for i in range(max(args.sessions, args.turns)):
                if i < args.sessions:
                    fresh.append(await fresh_sessions[i].turn(pids=pids, follow=args.follow))
                if i < args.turns:
                    loaded.append(await long.turn(pids=pids, follow=args.follow))
        else:
            loaded = [await long.turn(pids=pids, follow=args.follow) for _ in range(args.turns)]
        if args.breakdown:
            await breakdown(stack, long)

    cpu_fresh = [sum(s.cpu_s[i] for s in fresh_sessions) for i in range(2)]
    fresh_turns = sum(s.cpu_turns for s in fresh_sessions)
    if args.breakdown:
        fresh_timelines = [t for s in fresh_sessions for t in s.timelines]
        print_timeline_medians("0 prior messages", fresh_timelines)
        print_timeline_medians(f"{prior} prior messages", long.timelines)
    zero = summary("0 prior messages", fresh, cpu_fresh, fresh_turns)
    thousand = summary(
        f"{prior} prior messages (built in {padding_s:.1f}s)",
        loaded,
        long.cpu_s,
        long.cpu_turns,
    )
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    per_turn = [cpu_fresh[i] * 1000 / max(fresh_turns, 1) for i in range(2)]
    return (
        f"agent_turn overhead_ms_0={zero:.1f} overhead_ms_1000={thousand:.1f} "
        f"ratio={thousand / zero:.2f} server_cpu_ms={per_turn[0]:.2f} "
        f"worker_cpu_ms={per_turn[1]:.2f} prior_messages={prior} "
        f"fsync={'off' if args.no_fsync else 'on'} "
        f"store={'postgres' if args.postgres else 'sqlite'} "
        f"mode={'inproc' if args.in_process else 'separate'} "
        f"follow={'on' if args.follow else 'off'} "
        f"order={'interleaved' if args.interleave else 'sequential'} "
        f"link={'inproc' if args.in_process else 'unix' if args.unix else 'tcp'}"
    )


def main() -> None:
    if os.environ.get(ROLE_ENV) == "worker":
        run_agent_worker([build_flow()])
        return
    if os.environ.get(ROLE_ENV) == "embedded":
        workdir = Path(os.environ[EMBEDDED_DIR_ENV])
        embedded = run_embedded(workdir / "embedded.sqlite3", workdir / "embedded.ready")
        try:  # the loop the separate server runs on (uvicorn[standard] installs uvloop)
            import uvloop
        except ImportError:
            asyncio.run(embedded)
        else:
            uvloop.run(embedded)
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
    parser.add_argument(
        "--in-process",
        action="store_true",
        help="embedded server and agent Worker in one child process (see the docstring)",
    )
    parser.add_argument(
        "--interleave",
        action="store_true",
        help="build the long session first, then alternate fresh and long turns",
    )
    parser.add_argument(
        "--follow",
        action="store_true",
        help="follow the AgentEvents Stream during measured turns, as a UI does",
    )
    parser.add_argument(
        "--unix",
        action="store_true",
        help="the Worker connects over the server's Unix socket instead of TCP",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="the server on a fresh PostgreSQL database (DEX_TEST_POSTGRES_URL) instead of SQLite",
    )
    args = parser.parse_args()
    if args.postgres and (args.in_process or args.no_fsync):
        raise SystemExit("--postgres runs the separate server: drop --in-process and --no-fsync")
    if args.postgres:
        os.environ["DEX_TEST_DATABASE"] = "postgres"  # AgentTestStack creates the database
    if args.in_process and importlib.util.find_spec("dex_server.embedded") is None:
        raise SystemExit("--in-process needs dex_server.embedded, which this build lacks")
    if args.in_process and args.unix:
        raise SystemExit("--in-process links its Worker in memory: drop --unix")
    if args.no_fsync:
        os.environ["DEX_SERVER_FSYNC"] = "0"  # the server child inherits it
    line = asyncio.run(bench(args))
    print(line)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
