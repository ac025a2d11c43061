"""Flows keep running while servers, Workers and PostgreSQL are killed at random.

    uv run python bench/chaos.py [--minutes 5] [--store sqlite|postgres] [--servers N]
                                 [--database-url URL] [--workers 2] [--concurrency 4]
                                 [--steps 8] [--kill-min-s 10] [--kill-max-s 20]
                                 [--drain-s 120] [--seed S] [--keep]

For ``--minutes`` the bench keeps ``--concurrency`` Flows in flight, each a chain of
``--steps`` Steps. The Step at index ``i`` is, by ``i % 4``:

* 0, 2 ``Work``: retried (0.2 s doubling to 2 s, unlimited attempts); appends its effect
  line on every attempt.
* 1 ``Once``: a single attempt (``RetryPolicy(maximum_attempts=1)``) that calls
  ``await ctx.heartbeat(durable=True)`` and then appends its effect line: at most once,
  ever. A failed attempt (its Worker or server died) proceeds to ``Rescue`` (retried).
* 3 ``Nap``: a durable 0.2 s Timer, then an ``execute`` that appends its line.

An effect line is ``"<flow_id> <Step type>.<index> <attempt> <pid>"``, written with one
``O_APPEND`` write to a log file shared by every Worker. Every 10-20 s (random) one
fault is injected and printed on stderr, each kind once per round in a random order (the
server or Worker is also picked at random):

* a server is SIGKILLed and started again at once on the same store and port;
* a Worker is SIGKILLed and started again at once on the same server;
* with the bench's own PostgreSQL: ``pg_ctl restart -m fast`` or ``-m immediate``.

After ``--minutes`` the kills stop and the bench waits up to ``--drain-s`` for the Flows in
flight, then checks every Flow's history (``AsyncClient.get_history``) and the effect log:

* ``lost``: Flows whose start was accepted that did not complete by the deadline
  (failed, or still running; each is named on stderr). No Flow here is meant to fail:
  a failed ``Once`` goes on with ``Rescue``.
* ``duplicate_commits``: Step indexes of a Flow with more than one ``StepExecuteCompleted``
  event (the same execution committed twice, or more executions committed than the chain
  scheduled), plus executions with more than one ``StepWaitForCompleted``.
* ``single_attempt_reruns``: ``Once`` Steps whose effect line appears more than once.
* ``steps``: ``StepExecuteCompleted`` events in all histories.

It also fails on a completed Flow missing a Step's commit, or a committed Step with no
effect line (named on stderr). A ``STALL`` line on stderr says that no Flow closed for
``--stall-s`` (10 s) while some were in flight (a later fault, e.g. a server restart, may
have unblocked them: the final ``max_stall_s`` shows it even when nothing was lost). Stores:

* ``--store sqlite`` (default): one server on a temporary SQLite file (fsync on).
* ``--store postgres``: a private PostgreSQL cluster (``initdb`` into the temporary
  directory, run as the ``postgres`` user, on a free loopback port, fsync on), restarted
  by the bench; ``--servers N`` servers share it. The machine's own PostgreSQL is never
  touched.
* ``--database-url postgresql://...`` (an empty database) or ``sqlite:///PATH``: that
  store as is, never restarted (``pg_restarts=0``).

Every child runs in its own process group on loopback and is killed at exit (also on
Ctrl-C or SIGTERM); the temporary directory is removed unless ``--keep``. Exit status 1
when any check fails. The last line (stdout) is::

    chaos kills=.. pg_restarts=.. flows=.. completed=.. steps=.. duplicate_commits=0
        single_attempt_reruns=0 lost=0 minutes=..
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import glob
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

import dex
import msgspec
from dex.errors import DexServiceError, FlowNotFoundError, LongPollTimeoutError

T = TypeVar("T")

LOG_ENV = "DEX_CHAOS_LOG"
STEPS_ENV = "DEX_CHAOS_STEPS"
READY_ENV = "DEX_CHAOS_READY"

# --------------------------------------------------------------------------- the Flow

_RETRY = dex.RetryPolicy(
    initial_interval=timedelta(seconds=0.2), maximum_interval=timedelta(seconds=2)
)


def _effect(ctx: dex.Context, name: str, index: int) -> None:
    line = f"{ctx.flow_id} {name}.{index} {ctx.attempt} {os.getpid()}\n"
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def _next(index: int) -> dex.StepDecision:
    if index + 1 >= int(os.environ[STEPS_ENV]):
        return dex.StepDecision.graceful_complete(index + 1)
    return dex.StepDecision.go_to(step_at(index + 1), index + 1)


class Work(dex.Step[int]):
    async def execute(self, ctx: dex.Context, index: int) -> dex.StepDecision:
        await asyncio.sleep(random.uniform(0.02, 0.15))
        _effect(ctx, "Work", index)
        return _next(index)

    def get_step_options(self) -> dex.StepOptions:
        return dex.StepOptions(execute_retry=_RETRY)


class Once(dex.Step[int]):
    async def execute(self, ctx: dex.Context, index: int) -> dex.StepDecision:
        assert isinstance(ctx, dex.AsyncContext)
        await ctx.heartbeat(durable=True)
        _effect(ctx, "Once", index)
        await asyncio.sleep(random.uniform(0.02, 0.15))  # a kill here loses the attempt
        return _next(index)

    def get_step_options(self) -> dex.StepOptions:
        once = dex.RetryPolicy(maximum_attempts=1)
        return dex.StepOptions(execute_retry=once).on_execute_failure_proceed_to(Rescue)


class Rescue(dex.Step[int]):
    async def execute(self, ctx: dex.Context, index: int) -> dex.StepDecision:
        _effect(ctx, "Rescue", index)
        return _next(index)

    def get_step_options(self) -> dex.StepOptions:
        return dex.StepOptions(execute_retry=_RETRY)


class Nap(dex.Step[int]):
    def wait_for(self, ctx: dex.Context, index: int) -> dex.Wait:
        return dex.Wait.until(dex.Timer.by_duration(timedelta(seconds=0.2)))

    async def execute(self, ctx: dex.Context, index: int) -> dex.StepDecision:
        _effect(ctx, "Nap", index)
        return _next(index)

    def get_step_options(self) -> dex.StepOptions:
        return dex.StepOptions(execute_retry=_RETRY, wait_for_retry=_RETRY)


_KINDS: tuple[type[dex.Step[int]], ...] = (Work, Once, Work, Nap)


def step_at(index: int) -> type[dex.Step[int]]:
    return _KINDS[index % len(_KINDS)]


class Chaos(dex.Flow[int]):
    def get_steps(self) -> dex.StepList[int]:
        return dex.StepList.start_step(Work()).other_steps(Once(), Rescue(), Nap())


CHAOS = Chaos()


def registry() -> dex.Registry:
    return dex.Registry([CHAOS], allow_async_handlers=True)


async def run_worker(address: str, slots: int) -> None:
    worker = dex.AsyncWorker(
        registry(),
        options=dex.WorkerOptions(
            server_address=address, pull=dex.PullWorkerOptions(max_concurrent_tasks=slots)
        ),
    )
    running = asyncio.create_task(worker.run())
    try:
        await worker.wait_pull_registered(timeout=120)
        (Path(os.environ[READY_ENV]) / f"worker-{os.getpid()}.ready").touch()
    except TimeoutError:
        pass  # keeps trying to connect; only the first start waits for this file
    await running


# --------------------------------------------------------------------------- processes

_T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[{time.monotonic() - _T0:7.1f}s] {message}", file=sys.stderr, flush=True)


def _die_with_parent() -> None:
    # runs in the child before exec: SIGKILL it if the bench itself dies abruptly
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Child:
    """One restartable child process in its own process group (SIGKILLed as a group)."""

    def __init__(self, name: str, workdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.workdir = workdir
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.expected_exit = False

    def command(self) -> list[str]:
        raise NotImplementedError

    def spawn(self) -> None:
        with open(self.workdir / f"{self.name}.log", "ab") as log:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )
        self.expected_exit = False

    @property
    def pid(self) -> int:
        return self.proc.pid if self.proc is not None else 0

    def died(self) -> int | None:
        """The exit code if the process ended without the bench killing it."""
        if self.proc is None or self.expected_exit:
            return None
        return self.proc.poll()

    def kill(self) -> None:
        if self.proc is None:
            return
        self.expected_exit = True
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.proc.wait()


class Server(Child):
    def __init__(self, name: str, workdir: Path, env: dict[str, str], db_args: list[str]) -> None:
        super().__init__(name, workdir, env)
        self.db_args = db_args
        self.port = 0  # the first start picks one; restarts keep it
        self.address = ""
        self.address_file = workdir / f"{name}.address"

    def command(self) -> list[str]:
        return [
            *(sys.executable, "-m", "dex_server", *self.db_args),
            *("--host", "127.0.0.1", "--port", str(self.port)),
            *("--address-file", str(self.address_file)),
        ]

    async def start(self, timeout_s: float = 90.0) -> None:
        """Start and wait until it listens; start again if it exits (e.g. no database yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.address_file.unlink(missing_ok=True)
            self.spawn()
            assert self.proc is not None
            while not self.address_file.exists() and self.proc.poll() is None:
                if time.monotonic() > deadline:
                    self.kill()
                    raise SystemExit(f"{self.name} did not start; see its log")
                await asyncio.sleep(0.02)
            if self.proc.poll() is None:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{self.name} keeps exiting; see its log")
            await asyncio.sleep(0.5)
        self.address = self.address_file.read_text().strip()
        self.port = int(self.address.rsplit(":", 1)[1])


class Worker(Child):
    def __init__(
        self, name: str, workdir: Path, env: dict[str, str], server: Server, slots: int
    ) -> None:
        super().__init__(name, workdir, env)
        self.server = server
        self.slots = slots

    def command(self) -> list[str]:
        return [
            sys.executable,
            __file__,
            "--worker",
            self.server.address,
            "--slots",
            str(self.slots),
        ]


class PrivatePostgres:
    """A throwaway PostgreSQL cluster in ``root``, run as the ``postgres`` user."""

    def __init__(self, root: Path) -> None:
        found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        preferred = [p for p in found if "/15/" in p]
        if not found:
            raise SystemExit("--store postgres: no /usr/lib/postgresql/*/bin/initdb")
        self.bin = Path((preferred or found)[-1]).parent
        self.root = root
        self.data = root / "data"
        self.port = free_port()
        self.started = False
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, tool: str, *args: str) -> list[str]:
        cmd = [str(self.bin / tool), *args]
        return cmd if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *cmd]

    def _run(self, cmd: list[str]) -> None:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")

    def init_and_start(self) -> None:
        self.root.mkdir()
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.root, user.pw_uid, user.pw_gid)
        self._run(
            self._as_postgres(
                "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8"
            )
        )
        with open(self.data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nlisten_addresses = '127.0.0.1'\nport = {self.port}\n"
                f"unix_socket_directories = '{self.root}'\nmax_connections = 100\n"
            )
        self.started = True
        self._run(self._pg_ctl("start"))

    def _pg_ctl(self, action: str, *extra: str) -> list[str]:
        log = str(self.root / "postgres.log")
        return self._as_postgres(
            "pg_ctl", "-D", str(self.data), "-l", log, "-w", "-t", "120", *extra, action
        )

    async def restart(self, mode: str) -> None:
        proc = await asyncio.create_subprocess_exec(
            *self._pg_ctl("restart", "-m", mode),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        out, _ = await proc.communicate()
        if proc.returncode != 0:
            raise SystemExit(f"pg_ctl restart -m {mode} failed:\n{out.decode()}")

    def stop(self) -> None:
        if self.started:
            self.started = False
            cmd = self._pg_ctl("stop", "-m", "immediate")
            subprocess.run(cmd, capture_output=True, timeout=120, check=False)


@dataclass
class Cluster:
    servers: list[Server] = field(default_factory=list)
    workers: list[Worker] = field(default_factory=list)
    postgres: PrivatePostgres | None = None

    def kill_all(self) -> None:
        for child in [*self.workers, *self.servers]:
            child.kill()
        if self.postgres is not None:
            self.postgres.stop()


# --------------------------------------------------------------------------- the run


@dataclass
class Tracked:
    flow_id: str
    launched_at: float
    accepted: bool = False
    done: bool = False
    status: str = "running"
    error: str = ""


@dataclass
class Run:
    args: argparse.Namespace
    cluster: Cluster
    clients: list[dex.AsyncClient]
    log: Path
    run_end: float
    final_deadline: float
    flows: list[Tracked] = field(default_factory=list)
    kills: int = 0
    pg_restarts: int = 0
    crashes: int = 0
    freed: asyncio.Event = field(default_factory=asyncio.Event)
    last_progress: float = field(default_factory=time.monotonic)  # a Flow last closed
    max_stall_s: float = 0.0
    stalled_since: float | None = None


async def retrying(
    clients: list[dex.AsyncClient],
    first: int,
    op: Callable[[dex.AsyncClient], Awaitable[T]],
    deadline: float,
) -> T:
    """``op`` on a client, again on the next server after a retryable error, until ``deadline``."""
    tries = 0
    while True:
        client = clients[(first + tries) % len(clients)]
        try:
            return await op(client)
        except DexServiceError as exc:
            if isinstance(exc, LongPollTimeoutError) or not exc.retryable:
                raise
            if time.monotonic() > deadline:
                raise
        tries += 1
        await asyncio.sleep(min(1.0, 0.1 * tries))


async def run_flow(run: Run, flow: Tracked, first: int) -> None:
    request = dex.StartFlowOptions(request_id=uuid.uuid4().hex)  # idempotent when sent again
    try:
        await retrying(
            run.clients,
            first,
            lambda c: c.start_flow(CHAOS, flow.flow_id, 0, options=request),
            min(run.final_deadline, time.monotonic() + 60),
        )
        flow.accepted = True

        async def wait(c: dex.AsyncClient) -> dex.FlowResult:
            return await c.wait_for_flow(
                flow.flow_id, max(1.0, run.final_deadline - time.monotonic())
            )

        result = await retrying(run.clients, first, wait, run.final_deadline)
        flow.status = result.status.value
        flow.error = result.error_message or ""
    except DexServiceError as exc:
        flow.error = f"{type(exc).__name__}: {exc}"
    finally:
        flow.done = True
        run.freed.set()
        run.last_progress = time.monotonic()


async def launch(run: Run) -> list[asyncio.Task[None]]:
    """Keep ``--concurrency`` Flows in flight until the run ends (stuck ones stop counting)."""
    tasks: list[asyncio.Task[None]] = []
    while time.monotonic() < run.run_end:
        now = time.monotonic()
        busy = sum(1 for f in run.flows if not f.done and now - f.launched_at < run.args.stuck_s)
        if busy >= run.args.concurrency:
            run.freed.clear()
            try:
                await asyncio.wait_for(run.freed.wait(), 1.0)
            except TimeoutError:
                pass
            continue
        flow = Tracked(f"chaos-{len(run.flows):05d}-{uuid.uuid4().hex[:6]}", now)
        run.flows.append(flow)
        tasks.append(asyncio.create_task(run_flow(run, flow, len(run.flows))))
    return tasks


async def restart_child(run: Run, child: Child, why: str) -> None:
    started = time.monotonic()
    old = child.pid
    child.kill()
    if isinstance(child, Server):
        await child.start()
    else:
        child.spawn()
    took = time.monotonic() - started
    say(f"{why} {child.name} (pid {old}); restarted as pid {child.pid} in {took:.2f} s")


async def one_fault(run: Run, rng: random.Random, kind: str) -> None:
    if kind == "postgres":
        assert run.cluster.postgres is not None
        mode = rng.choice(["fast", "immediate"])
        started = time.monotonic()
        await run.cluster.postgres.restart(mode)
        run.pg_restarts += 1
        say(f"pg_ctl restart -m {mode} in {time.monotonic() - started:.2f} s")
        return
    children: list[Child] = [*(run.cluster.servers if kind == "server" else run.cluster.workers)]
    run.kills += 1
    await restart_child(run, rng.choice(children), "SIGKILL")


async def chaos(run: Run, rng: random.Random) -> None:
    """Inject a fault every kill-min..kill-max s until the run ends; restart crashed children."""
    next_fault = time.monotonic() + rng.uniform(run.args.kill_min_s, run.args.kill_max_s)
    next_summary = time.monotonic() + run.args.summary_s
    kinds = ["server", "worker"] + (["postgres"] if run.cluster.postgres is not None else [])
    due: list[str] = []  # each kind once per round, in a random order
    while time.monotonic() < run.final_deadline and not all_done(run):
        for child in [*run.cluster.servers, *run.cluster.workers]:
            code = child.died()
            if code is not None:
                run.crashes += 1
                await restart_child(run, child, f"exited on its own (code {code}):")
        now = time.monotonic()
        if now >= next_fault and now < run.run_end:
            due = due or rng.sample(kinds, len(kinds))
            await one_fault(run, rng, due.pop())
            next_fault = time.monotonic() + rng.uniform(run.args.kill_min_s, run.args.kill_max_s)
        watch_stall(run, now)
        if now >= next_summary:
            summary(run)
            next_summary = now + run.args.summary_s
        await asyncio.sleep(0.25)


def watch_stall(run: Run, now: float) -> None:
    """Say when no Flow closed for --stall-s while some are in flight, and when one does."""
    quiet = now - run.last_progress
    if any(not f.done for f in run.flows):
        run.max_stall_s = max(run.max_stall_s, quiet)
        if quiet >= run.args.stall_s and run.stalled_since is None:
            run.stalled_since = run.last_progress
            say(f"STALL: no Flow closed for {quiet:.0f} s")
    if run.stalled_since is not None and run.last_progress > run.stalled_since:
        say(f"a Flow closed again, {run.last_progress - run.stalled_since:.1f} s after the last")
        run.stalled_since = None


def all_done(run: Run) -> bool:
    return time.monotonic() >= run.run_end and all(f.done for f in run.flows)


def summary(run: Run) -> None:
    done = [f for f in run.flows if f.done]
    completed = sum(1 for f in done if f.status == "completed")
    effects = run.log.read_bytes().count(b"\n") if run.log.exists() else 0
    phase = "running" if time.monotonic() < run.run_end else "draining"
    say(
        f"{phase}: flows={len(run.flows)} completed={completed} "
        f"other={len(done) - completed} in_flight={len(run.flows) - len(done)} "
        f"kills={run.kills} pg_restarts={run.pg_restarts} effect_lines={effects}"
    )


# --------------------------------------------------------------------------- checks


@dataclass
class Findings:
    steps: int = 0
    duplicate_commits: int = 0
    missing_commits: int = 0
    missing_effects: int = 0
    single_attempt_reruns: int = 0
    rescued: int = 0


async def history(run: Run, flow_id: str) -> list[Any]:
    events: list[Any] = []
    token: str | None = None
    deadline = time.monotonic() + 120
    while True:

        async def page_of(c: dex.AsyncClient, token: str | None = token) -> Any:
            return await c.get_history(flow_id, page_size=1000, page_token=token)

        page = await retrying(run.clients, 0, page_of, deadline)
        events.extend(page.events)
        token = page.next_page_token
        if not token:
            return events


def check_flow(
    flow: Tracked, events: list[Any], effects: Counter[tuple[str, str]], found: Findings
) -> None:
    by_index: Counter[int] = Counter()
    waits: Counter[str] = Counter()
    for ev in events:
        if ev.type not in ("StepExecuteCompleted", "StepWaitForCompleted"):
            continue
        payload = msgspec.json.decode(ev.payload)
        context = payload["context"]
        if ev.type == "StepWaitForCompleted":
            waits[context["stepExecutionId"]] += 1
            continue
        found.steps += 1
        index = int(payload["input"]["stepInput"])
        by_index[index] += 1
        name = f"{context['stepType']}.{index}"
        found.rescued += context["stepType"] == "Rescue"
        if effects[(flow.flow_id, name)] == 0:
            found.missing_effects += 1
            say(f"CHECK {flow.flow_id}: {name} committed but its effect line is missing")
    for index, n in sorted(by_index.items()):
        if n > 1:
            found.duplicate_commits += n - 1
            say(f"CHECK {flow.flow_id}: Step {index} committed {n} times")
    for execution, n in waits.items():
        if n > 1:
            found.duplicate_commits += n - 1
            say(f"CHECK {flow.flow_id}: wait_for of {execution} committed {n} times")
    if flow.status == "completed":
        missing = [i for i in range(run_steps()) if by_index[i] == 0]
        if missing:
            found.missing_commits += len(missing)
            say(f"CHECK {flow.flow_id}: completed without committing Steps {missing}")


def run_steps() -> int:
    return int(os.environ[STEPS_ENV])


def read_effects(log: Path) -> Counter[tuple[str, str]]:
    rows = [line.split() for line in log.read_text().splitlines()] if log.exists() else []
    return Counter((r[0], r[1]) for r in rows if len(r) == 4)


async def check(run: Run) -> Findings:
    found = Findings()
    effects = read_effects(run.log)
    for (flow_id, name), n in sorted(effects.items()):
        if name.startswith("Once.") and n > 1:
            found.single_attempt_reruns += 1
            say(f"CHECK {flow_id}: single-attempt {name} ran its effect {n} times")
    for flow in run.flows:
        if not flow.accepted:
            await settle_unconfirmed(run, flow)
            if not flow.accepted:
                continue
        check_flow(flow, await history(run, flow.flow_id), effects, found)
    return found


async def settle_unconfirmed(run: Run, flow: Tracked) -> None:
    """A start whose answer never came: count the Flow only if the server has it."""
    try:
        info = await retrying(
            run.clients, 0, lambda c: c.describe_flow(flow.flow_id), time.monotonic() + 60
        )
    except FlowNotFoundError:
        say(f"{flow.flow_id}: start never accepted ({flow.error}); not counted")
        return
    flow.accepted = True
    flow.status = info.status.value


# --------------------------------------------------------------------------- main


def database_args(args: argparse.Namespace, workdir: Path, cluster: Cluster) -> list[str]:
    url: str | None = args.database_url
    if url is None and args.store == "postgres":
        cluster.postgres = PrivatePostgres(workdir / "pg")
        say(f"initdb + pg_ctl start: private PostgreSQL on 127.0.0.1:{cluster.postgres.port}")
        cluster.postgres.init_and_start()
        url = cluster.postgres.url
    if url is None:
        return ["--database-path", str(workdir / "chaos.sqlite3")]
    if url.startswith(("postgresql://", "postgres://")):
        return ["--database-url", url]
    if url.startswith("sqlite:///"):
        return ["--database-path", str(Path(url.removeprefix("sqlite:///")).resolve())]
    raise SystemExit(f"--database-url: expected sqlite:///PATH or postgresql://, got {url!r}")


async def start_cluster(
    args: argparse.Namespace, workdir: Path, cluster: Cluster, log: Path
) -> None:
    db = database_args(args, workdir, cluster)
    if args.servers > 1 and db[0] != "--database-url":
        raise SystemExit("--servers N needs PostgreSQL (--store postgres or --database-url)")
    env = {
        **os.environ,
        LOG_ENV: str(log),
        STEPS_ENV: str(args.steps),
        READY_ENV: str(workdir),
        "PYTHONUNBUFFERED": "1",
    }
    for i in range(args.servers):
        cluster.servers.append(Server(f"server{i}", workdir, env, db))
        await cluster.servers[-1].start()
        say(f"server{i} pid {cluster.servers[-1].pid} on {cluster.servers[-1].address}")
    for i in range(args.workers):
        server = cluster.servers[i % len(cluster.servers)]
        cluster.workers.append(Worker(f"worker{i}", workdir, env, server, args.slots))
        cluster.workers[-1].spawn()
        say(f"worker{i} pid {cluster.workers[-1].pid} on {server.name}")
    deadline = time.monotonic() + 120
    for w in cluster.workers:  # the clock starts once every Worker registered
        while not (workdir / f"worker-{w.pid}.ready").exists():
            if w.proc is None or w.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"{w.name} did not register; see {w.name}.log (--keep)")
            await asyncio.sleep(0.05)


async def bench(args: argparse.Namespace, workdir: Path, cluster: Cluster) -> int:
    log = workdir / "effects.log"
    os.environ[STEPS_ENV] = str(args.steps)
    await start_cluster(args, workdir, cluster, log)
    options = [dex.ClientOptions(server_address=s.address, timeout=30.0) for s in cluster.servers]
    clients = [dex.AsyncClient(registry(), options=o) for o in options]
    began = time.monotonic()
    run_end = began + args.minutes * 60.0
    run = Run(args, cluster, clients, log, run_end, run_end + args.drain_s)
    rng = random.Random(args.seed)
    try:
        faults = asyncio.create_task(chaos(run, rng))
        tasks = await launch(run)
        say(f"run over: no more faults; waiting up to {args.drain_s:.0f} s for the Flows")
        if tasks:
            await asyncio.wait(tasks, timeout=max(1.0, run.final_deadline - time.monotonic()) + 30)
        await faults
        minutes = (time.monotonic() - began) / 60.0
        summary(run)
        found = await check(run)
    finally:
        for c in clients:
            await c.close()
    return report(run, found, minutes)


def report(run: Run, found: Findings, minutes: float) -> int:
    counted = [f for f in run.flows if f.accepted]
    completed = sum(1 for f in counted if f.status == "completed")
    for f in counted:
        if f.status != "completed":
            say(f"LOST {f.flow_id}: status {f.status} {f.error}".rstrip())
    lost = len(counted) - completed
    say(
        f"max_stall_s={run.max_stall_s:.1f} crashes={run.crashes} rescued={found.rescued} "
        f"missing_commits={found.missing_commits} missing_effects={found.missing_effects}"
    )
    print(
        f"chaos kills={run.kills} pg_restarts={run.pg_restarts} flows={len(counted)} "
        f"completed={completed} steps={found.steps} duplicate_commits={found.duplicate_commits} "
        f"single_attempt_reruns={found.single_attempt_reruns} lost={lost} minutes={minutes:.2f}",
        flush=True,
    )
    bad = (
        found.duplicate_commits,
        found.single_attempt_reruns,
        lost,
        found.missing_commits,
        found.missing_effects,
    )
    return 1 if any(bad) else 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Dex chaos benchmark (kills under load)")
    p.add_argument("--minutes", type=float, default=5.0, help="how long faults are injected")
    p.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    p.add_argument("--servers", type=int, default=1, help="servers (PostgreSQL only for >1)")
    p.add_argument("--database-url", default=None, help="an existing store, never restarted")
    p.add_argument("--workers", type=int, default=2, help="Worker processes (round robin)")
    p.add_argument("--slots", type=int, default=16, help="max_concurrent_tasks per Worker")
    p.add_argument("--concurrency", type=int, default=4, help="Flows in flight")
    p.add_argument("--steps", type=int, default=8, help="Steps per Flow")
    p.add_argument("--kill-min-s", type=float, default=10.0)
    p.add_argument("--kill-max-s", type=float, default=20.0)
    p.add_argument("--drain-s", type=float, default=120.0, help="wait for Flows after the run")
    p.add_argument("--stuck-s", type=float, default=60.0, help="a Flow older stops counting")
    p.add_argument("--stall-s", type=float, default=10.0, help="report no progress for this")
    p.add_argument("--summary-s", type=float, default=15.0, help="progress line period")
    p.add_argument("--seed", type=int, default=None, help="seed of the fault schedule")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    p.add_argument("--worker", metavar="ADDRESS", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.servers < 1 or args.workers < 1 or args.concurrency < 1 or args.steps < 1:
        p.error("--servers, --workers, --concurrency and --steps must be at least 1")
    if not 0 < args.kill_min_s <= args.kill_max_s:
        p.error("need 0 < --kill-min-s <= --kill-max-s")
    return args


def main() -> None:
    args = parse_args()
    if args.worker:
        asyncio.run(run_worker(args.worker, args.slots))
        return
    signal.signal(signal.SIGTERM, _interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    workdir = Path(tempfile.mkdtemp(prefix="dex-chaos-"))
    workdir.chmod(0o711)  # the private PostgreSQL's user must reach its folder inside
    cluster = Cluster()
    code = 2
    try:
        code = asyncio.run(bench(args, workdir, cluster))
    except KeyboardInterrupt:
        say("interrupted")
        code = 130
    finally:
        cluster.kill_all()
        if args.keep:
            say(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    sys.exit(code)


if __name__ == "__main__":
    main()
