"""Per-Step cost of Dex side by side with DBOS, LangGraph and Restate, interleaved.

    uv run python bench/peers.py [--rounds 5] [--steps 300] [--only dbos,langgraph,restate]
                                 [--postgres] [--pg-url URL] [--peers-venv DIR]
                                 [--count-fsyncs]

The workload is the same everywhere: one workflow runs a sequential chain of ``--steps``
durable no-op steps, after a warm-up chain of 50 in the same process. The figure is the
time from one step's durable completion to the next one's (``S`` steps give ``S - 1``
intervals), reported as p50 / p95, plus the caller's wall clock per step (start to result,
divided by ``S``) as a cross-check. Every round runs every contender once, each in its own
child process, the order rotating from round to round so that drifting machine load falls
on all alike. On a shared machine single figures drift with the load; only the ratios of
one round (ours / peer, their median over the rounds) mean something.

Contenders and what each commits per step (fsync on everywhere):

- ``ours``: ``bench/step_overhead.py``'s sequential part (``--flows 0``) in this
  repository's environment: server and Worker in separate processes, SQLite in WAL mode
  with ``synchronous=FULL``; the interval is between the server's commits of consecutive
  ``StepExecuteCompleted`` events. ``--postgres`` adds ``ours_pg``: the same on a fresh
  PostgreSQL database per run (``synchronous_commit`` on).
- ``ours_inproc``: the same with ``--in-process``: the server embedded in the application
  (``dex_server.embedded.EmbeddedServer``) and its Worker in that one process, linked in
  memory instead of a WebSocket; same store, same commits per step. It always runs, and
  every peer gets a second ratio ``ratio_<peer>_inproc`` = ours_inproc / peer.
- ``dbos_sqlite`` / ``dbos_pg``: DBOS (a library: workflow, steps and database client in
  one process; ``@DBOS.step()`` no-ops in a ``@DBOS.workflow()``). Each step reads the
  system database for a recorded result, then commits its own. SQLite: DBOS keeps
  SQLite's defaults (rollback journal, ``synchronous=FULL``); the bench switches every
  connection to WAL + ``synchronous=FULL`` like ours (the faster durable mode) and reads it
  back. PostgreSQL: a fresh database per run, the server's ``fsync`` and
  ``synchronous_commit`` (both on) read back. ``ratio_dbos_pg`` compares with ``ours_pg``
  when ``--postgres`` is given, else with ``ours`` on SQLite (``dbos_pg_vs`` says which).
- ``langgraph`` ("LangGraph sync"): a graph of one node that loops ``S`` times, the sync
  SQLite checkpointer (``langgraph-checkpoint-sqlite``) and ``durability="sync"`` (each
  super-step's checkpoint is committed before the next one starts). ``SqliteSaver.setup()``
  sets WAL and leaves ``synchronous`` at SQLite's default (``FULL`` in this build); the bench
  sets ``FULL`` explicitly and reads it back.
- ``restate``: the Python SDK (``ctx.run`` no-ops in one handler, served by Hypercorn over
  HTTP/2) and ``restate-server`` from npm (``@restatedev/restate-server``), fresh data
  directory per run, one partition, defaults otherwise: each ``ctx.run`` result is appended
  to the server's log (RocksDB, WAL fsync on) and acknowledged before the handler goes on.

The peers are installed into a separate virtual environment (``--peers-venv``, default
``.bench-peers/`` in the repository root, git-ignored) with ``uv venv`` + ``uv pip install``
of pinned versions from PyPI, and ``restate-server`` with ``npm install`` into it; nothing
enters this repository's lock files. Their scripts are ``bench/_peers/*.py``. A peer that
cannot be set up (no ``npm``, no PostgreSQL) is skipped with the reason and reported as
``skipped``. The last line is::

    peers rounds=N steps=S ours_p50_ms=... dbos_sqlite_p50_ms=... dbos_pg_p50_ms=...
        langgraph_p50_ms=... restate_p50_ms=... ratio_dbos_sqlite=... ratio_dbos_pg=...
        ratio_langgraph=... ratio_restate=... ours_pg_p50_ms=... dbos_pg_vs=ours|ours_pg
        ours_inproc_p50_ms=... ratio_dbos_sqlite_inproc=... ratio_dbos_pg_inproc=...
        ratio_langgraph_inproc=... ratio_restate_inproc=...

(one line; ratio = ours / peer, below 1 means ours is faster).

``--count-fsyncs`` times nothing: it runs every contender once under ``strace -f -c`` and
prints the ``fsync`` + ``fdatasync`` calls per step of each (warm-up included), the check
that each one really syncs its store for every step (PostgreSQL contenders: not counted, the
sync happens in the database server). Last line: ``peers_fsyncs_per_step ours=... ...``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
PEER_SCRIPTS = ROOT / "bench" / "_peers"

# Pinned so that figures from different days compare the same peers.
PYPI_PACKAGES = (
    "dbos==3.4.0",
    "langgraph==1.2.24",
    "langgraph-checkpoint-sqlite==3.1.2",
    "restate-sdk==1.3.0",
    "hypercorn==0.18.0",
)
RESTATE_NPM = "@restatedev/restate-server@1.7.12"

PEERS = ("dbos_sqlite", "dbos_pg", "langgraph", "restate")
ALIASES = {"dbos": ("dbos_sqlite", "dbos_pg")}
RUN_TIMEOUT_S = 1200


@dataclass
class Result:
    p50_ms: float
    p95_ms: float
    wall_ms: float
    durability: str
    seconds: float


class SetupError(Exception):
    """A peer cannot run on this machine; the message says what is missing."""


# --------------------------------------------------------------------------- setup


def run_quiet(cmd: list[str], what: str, timeout: float = 900) -> None:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise SetupError(f"{what}: {cmd[0]} not found") from e
    except subprocess.TimeoutExpired as e:
        raise SetupError(f"{what}: timed out after {timeout:.0f} s: {' '.join(cmd)}") from e
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip()[-2000:]
        raise SetupError(f"{what} failed ({' '.join(cmd)}):\n{tail}")


def peers_python(venv: Path) -> Path:
    """The peers' interpreter, installing the pinned packages when they are not there."""
    python = venv / "bin" / "python"
    marker = venv / "peers-installed.txt"
    wanted = "\n".join(PYPI_PACKAGES) + "\n"
    if python.exists() and marker.exists() and marker.read_text() == wanted:
        return python
    uv = shutil.which("uv")
    if uv is None:
        raise SetupError("the peers' environment needs uv on PATH (https://docs.astral.sh/uv/)")
    version = f"{sys.version_info.major}.{sys.version_info.minor}"  # same Python as ours
    base = Path(sys.base_prefix) / "bin" / f"python{version}"
    print(f"setup: creating {venv} (Python {version}) with {', '.join(PYPI_PACKAGES)}")
    if not python.exists():
        interpreter = str(base) if base.exists() else version
        run_quiet([uv, "venv", "--quiet", "--python", interpreter, str(venv)], "uv venv")
    run_quiet(
        [uv, "pip", "install", "--quiet", "--python", str(python), *PYPI_PACKAGES],
        "uv pip install",
    )
    marker.write_text(wanted)
    return python


def restate_binary(venv: Path) -> Path:
    """``restate-server`` from the npm registry, installed under the peers' environment."""
    prefix = venv / "npm"

    def found() -> Path | None:
        hits = sorted(prefix.glob("node_modules/@restatedev/restate-server-*/bin/restate-server"))
        return hits[0] if hits else None

    binary = found()
    if binary is not None and RESTATE_NPM.rsplit("@", 1)[1] in str(
        (binary.parent.parent / "package.json").read_text()
    ):
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError(
            "Restate needs restate-server, which is not on PyPI: it comes from the npm "
            f"package {RESTATE_NPM}, and npm is not on PATH"
        )
    print(f"setup: npm install {RESTATE_NPM} into {prefix}")
    prefix.mkdir(parents=True, exist_ok=True)
    run_quiet(
        [npm, "install", "--prefix", str(prefix), "--no-save", "--no-audit", "--no-fund"]
        + ["--ignore-scripts", "--no-package-lock", RESTATE_NPM],
        f"npm install {RESTATE_NPM}",
    )
    binary = found()
    if binary is None:
        raise SetupError(
            f"npm installed {RESTATE_NPM} but no binary for this platform "
            f"({sys.platform}, {os.uname().machine}) under {prefix}/node_modules/@restatedev"
        )
    return binary


def postgres_reachable(url: str) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    try:
        socket.create_connection((host, port), timeout=3).close()
    except OSError as e:
        raise SetupError(f"PostgreSQL is not reachable at {host}:{port} ({e})") from e


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


def create_database(admin_url: str) -> str:
    import psycopg  # the server's PostgreSQL driver, in this repository's environment

    name = f"peers_ours_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name


def drop_database(admin_url: str, name: str) -> None:
    import psycopg

    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --------------------------------------------------------------------------- runs

FINAL = re.compile(r"(?m)^(?:peer|step_overhead) (.*)$")
WALL = re.compile(r"client wall clock incl\. start and wait: ([0-9.]+) ms/Step")


def run_child(name: str, cmd: list[str], env: dict[str, str], workdir: Path) -> Result:
    started = time.perf_counter()
    log = workdir / f"{name}.log"
    with open(log, "w") as out:
        try:
            proc = subprocess.run(
                cmd,
                cwd=ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=out,
                text=True,
                timeout=RUN_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as e:
            raise SystemExit(f"{name}: no result after {RUN_TIMEOUT_S} s ({' '.join(cmd)})") from e
    seconds = time.perf_counter() - started
    matches = FINAL.findall(proc.stdout)
    if proc.returncode != 0 or not matches:
        tail = (proc.stdout + log.read_text())[-3000:]
        raise SystemExit(f"{name} failed (exit {proc.returncode}): {' '.join(cmd)}\n{tail}")
    fields = dict(pair.split("=", 1) for pair in matches[-1].split())
    if "wall_ms" not in fields:  # ours: the client's figure is in a text line
        wall = WALL.search(proc.stdout)
        fields["wall_ms"] = wall.group(1) if wall else "nan"
        fields["durability"] = f"{fields['store']}-fsync={fields['fsync']}"
        if fields.get("mode") == "inproc":
            fields["durability"] += " (one process)"
    return Result(
        p50_ms=float(fields["p50_ms"]),
        p95_ms=float(fields["p95_ms"]),
        wall_ms=float(fields["wall_ms"]),
        durability=fields["durability"],
        seconds=seconds,
    )


@dataclass
class Plan:
    steps: int
    pg_url: str
    python: Path | None
    restate: Path | None
    wrap: list[str] = field(default_factory=list)  # a command prefix (strace) or nothing

    def run(self, name: str, workdir: Path) -> Result:
        workdir.mkdir(parents=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        if name in ("ours", "ours_pg", "ours_inproc"):
            cmd = [*self.wrap, sys.executable, str(ROOT / "bench" / "step_overhead.py")]
            cmd += ["--steps", str(self.steps), "--flows", "0"]
            if name == "ours":
                return run_child(name, cmd, env, workdir)
            if name == "ours_inproc":
                return run_child(name, [*cmd, "--in-process"], env, workdir)
            database = create_database(self.pg_url)
            try:
                url = with_database(self.pg_url, database)
                return run_child(name, [*cmd, "--database-url", url], env, workdir)
            finally:
                drop_database(self.pg_url, database)
        assert self.python is not None
        # the peers' interpreter, not this repository's environment
        env.pop("VIRTUAL_ENV", None)
        script = {"dbos_sqlite": "dbos_chain.py", "dbos_pg": "dbos_chain.py"}.get(
            name, f"{name}_chain.py"
        )
        cmd = [*self.wrap, str(self.python), str(PEER_SCRIPTS / script)]
        cmd += ["--steps", str(self.steps)]
        cmd += ["--workdir", str(workdir)]
        if name == "dbos_pg":
            cmd += ["--database-url", self.pg_url]
        if name == "restate":
            env["PEERS_RESTATE_SERVER"] = str(self.restate)
        return run_child(name, cmd, env, workdir)


WARMUP_STEPS = 50  # every contender's warm-up chain (step_overhead.py's and _peers' default)


def count_fsyncs(plan: Plan, contenders: list[str], workdir: Path) -> None:
    """Run every contender once under ``strace -c`` and print its fsyncs per step."""
    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("--count-fsyncs needs strace on PATH (apt-get install strace)")
    line = []
    for name in contenders:
        if name.endswith("_pg"):
            # PostgreSQL syncs its WAL in its own server process, which strace does not see
            print(f"{name}: not counted (the fsyncs are the PostgreSQL server's)", flush=True)
            line.append(f"{name}=n/a")
            continue
        counts = workdir / f"{name}.strace"
        plan.wrap = [strace, "-f", "-qq", "-c", "-e", "trace=fsync,fdatasync", "-o", str(counts)]
        plan.run(name, workdir / name)
        calls = 0
        for row in counts.read_text().splitlines():
            cells = row.split()
            if cells and cells[-1] in ("fsync", "fdatasync"):
                calls += int(cells[3])
        steps = plan.steps + WARMUP_STEPS
        print(f"{name}: {calls} fsync/fdatasync calls for {steps} steps", flush=True)
        line.append(f"{name}={calls / steps:.2f}")
    print("peers_fsyncs_per_step " + " ".join(line))


def base_of(name: str, contenders: list[str]) -> str:
    """Which of ours a peer is compared with: the same store where we ran on it."""
    return "ours_pg" if name == "dbos_pg" and "ours_pg" in contenders else "ours"


def print_round(index: int, results: dict[str, Result], contenders: list[str]) -> None:
    print(f"\nround {index}: per-step ms (ratio = ours / peer p50)")
    print(
        f"  {'contender':<12} {'p50':>8} {'p95':>8} {'wall':>8} {'ratio':>7} {'inproc':>7}"
        "  durability"
    )
    for name in contenders:
        r = results[name]
        ratio = inproc = ""
        if not name.startswith("ours"):
            ratio = f"{results[base_of(name, contenders)].p50_ms / r.p50_ms:.3f}"
            inproc = f"{results['ours_inproc'].p50_ms / r.p50_ms:.3f}"
        print(
            f"  {name:<12} {r.p50_ms:>8.3f} {r.p95_ms:>8.3f} {r.wall_ms:>8.3f} {ratio:>7}"
            f" {inproc:>7}  {r.durability}"
        )
    print(flush=True)


def select(only: str | None) -> list[str]:
    if only is None:
        return list(PEERS)
    chosen: list[str] = []
    for item in (s.strip() for s in only.split(",") if s.strip()):
        names = ALIASES.get(item, (item,))
        for name in names:
            if name not in PEERS:
                known = ", ".join([*PEERS, *ALIASES])
                raise SystemExit(f"--only: unknown peer {item!r} (known: {known})")
            if name not in chosen:
                chosen.append(name)
    if not chosen:
        raise SystemExit("--only: name at least one peer")
    return chosen


def prepare(args: argparse.Namespace, peers: list[str]) -> tuple[Plan, list[str]]:
    """Set every selected peer up; the ones that cannot run are dropped with the reason."""
    plan = Plan(steps=args.steps, pg_url=args.pg_url, python=None, restate=None)
    ready: list[str] = []
    pg_error: str | None = None
    if args.postgres or "dbos_pg" in peers:
        try:
            postgres_reachable(args.pg_url)
        except SetupError as e:
            pg_error = str(e)
    if args.postgres and pg_error:
        raise SystemExit(f"--postgres: {pg_error}")
    try:
        plan.python = peers_python(args.peers_venv)
    except SetupError as e:
        print(f"skipped: every peer: {e}")
        return plan, []
    for name in peers:
        if name == "dbos_pg" and pg_error:
            print(f"skipped: dbos_pg: {pg_error}")
            continue
        if name == "restate":
            try:
                plan.restate = restate_binary(args.peers_venv)
            except SetupError as e:
                print(f"skipped: restate: {e}")
                continue
        ready.append(name)
    return plan, ready


def summary(
    args: argparse.Namespace, rounds: list[dict[str, Result]], contenders: list[str]
) -> str:
    def p50(name: str) -> str:
        if name not in contenders:
            return "skipped"
        return f"{statistics.median(r[name].p50_ms for r in rounds):.3f}"

    def ratio(name: str) -> str:
        if name not in contenders:
            return "skipped"
        base = base_of(name, contenders)
        return f"{statistics.median(r[base].p50_ms / r[name].p50_ms for r in rounds):.3f}"

    fields = [f"rounds={args.rounds}", f"steps={args.steps}", f"ours_p50_ms={p50('ours')}"]
    fields += [f"{name}_p50_ms={p50(name)}" for name in PEERS]
    fields += [f"ratio_{name}={ratio(name)}" for name in PEERS]
    fields += [f"ours_pg_p50_ms={p50('ours_pg')}", f"dbos_pg_vs={base_of('dbos_pg', contenders)}"]

    def ratio_inproc(name: str) -> str:
        if name not in contenders:
            return "skipped"
        return f"{statistics.median(r['ours_inproc'].p50_ms / r[name].p50_ms for r in rounds):.3f}"

    fields += [f"ours_inproc_p50_ms={p50('ours_inproc')}"]
    fields += [f"ratio_{name}_inproc={ratio_inproc(name)}" for name in PEERS]
    return "peers " + " ".join(fields)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Dex per-Step cost next to DBOS, LangGraph and Restate (interleaved rounds)"
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds of every contender")
    parser.add_argument("--steps", type=int, default=300, help="no-op steps in the chain")
    parser.add_argument(
        "--only",
        default=None,
        help=f"comma-separated peers among {', '.join([*PEERS, *ALIASES])} "
        "(default: all; ours always runs)",
    )
    parser.add_argument("--postgres", action="store_true", help="also run ours on PostgreSQL")
    parser.add_argument(
        "--pg-url",
        default="postgresql://postgres@127.0.0.1:5432/postgres",
        help="a PostgreSQL database to create the fresh per-run databases from",
    )
    parser.add_argument(
        "--count-fsyncs",
        action="store_true",
        help="instead of timing: run each contender once under strace, count fsyncs per step",
    )
    parser.add_argument(
        "--peers-venv",
        type=Path,
        default=ROOT / ".bench-peers",
        help="the peers' virtual environment (created when missing)",
    )
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if args.steps < 2:
        parser.error("--steps must be at least 2 (the figures are intervals between steps)")
    plan, peers = prepare(args, select(args.only))
    if not peers:
        raise SystemExit("no peer can run on this machine (see the 'skipped:' lines above)")
    contenders = ["ours", "ours_inproc", *(["ours_pg"] if args.postgres else []), *peers]
    if args.count_fsyncs:
        with tempfile.TemporaryDirectory(prefix="dex-peers-") as tmp:
            count_fsyncs(plan, contenders, Path(tmp))
        return
    print(f"contenders: {', '.join(contenders)}; {args.rounds} rounds of {args.steps} steps")
    print(f"load average (1 min) at start: {os.getloadavg()[0]:.2f}")
    rounds: list[dict[str, Result]] = []
    with tempfile.TemporaryDirectory(prefix="dex-peers-") as tmp:
        for index in range(1, args.rounds + 1):
            shift = (index - 1) % len(contenders)
            order = contenders[shift:] + contenders[:shift]
            results: dict[str, Result] = {}
            for name in order:
                r = plan.run(name, Path(tmp) / f"round{index}" / name)
                results[name] = r
                print(
                    f"round {index}/{args.rounds} {name}: p50 {r.p50_ms:.3f} ms, "
                    f"p95 {r.p95_ms:.3f} ms ({r.seconds:.1f} s)",
                    flush=True,
                )
            rounds.append(results)
            print_round(index, results, contenders)
    print(f"load average (1 min) at end: {os.getloadavg()[0]:.2f}")
    print(summary(args, rounds, contenders))


if __name__ == "__main__":
    main()
