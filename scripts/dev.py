#!/usr/bin/env python3
"""The front door of the repository: run the demo or the whole test suite.

Usage::

    python3 scripts/dev.py demo    # run the main example against an embedded server
    python3 scripts/dev.py test    # lint, type-check and test every package
    python3 scripts/dev.py build   # wheels and sdists of every package into dist/

``test`` runs the engine and dex-agents suites twice: on SQLite (each package's ``ci.sh``)
and on PostgreSQL (``DEX_TEST_DATABASE=postgres``: a fresh database per server on
``postgresql://postgres@127.0.0.1:5432/``, or ``DEX_TEST_POSTGRES_URL``). Set
``DEX_TEST_DATABASES=sqlite`` to skip the PostgreSQL runs.

Standard library only, so it runs on a fresh machine with nothing but Python 3.11+. It makes
sure ``uv`` is available (installing it with ``pip --user``, or into a private virtual
environment ``.dex-tools/`` when that is not allowed), installs the locked dependencies with
``uv sync --locked``, then does the work. Exits non-zero when anything fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import venv
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOOLS_DIR = ROOT / ".dex-tools"


def _say(message: str) -> None:
    print(f"[dev] {message}", flush=True)


def _user_bin_dirs() -> list[Path]:
    # Where `pip install --user` puts console scripts on Linux/macOS and on Windows.
    import site
    import sysconfig

    dirs = [Path(site.getuserbase()) / "bin"]
    try:
        dirs.append(Path(sysconfig.get_path("scripts", f"{os.name}_user")))
    except KeyError:
        pass
    return dirs


def _find_uv() -> str | None:
    found = shutil.which("uv")
    if found:
        return found
    candidates = [d / "uv" for d in _user_bin_dirs()]
    candidates.append(TOOLS_DIR / ("Scripts" if os.name == "nt" else "bin") / "uv")
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def ensure_uv() -> str:
    """Return the path of a working ``uv`` (installing it first if needed), on ``PATH``.

    The suites' ``ci.sh`` scripts call ``uv`` by name, so its folder is put first on this
    process's ``PATH``, which every child inherits.
    """
    found = _find_uv_or_install()
    folder = str(Path(found).parent)
    if folder not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = folder + os.pathsep + os.environ.get("PATH", "")
    return found


def _find_uv_or_install() -> str:
    found = _find_uv()
    if found:
        return found
    _say("uv not found: installing it with `python3 -m pip install --user uv`")
    pip_user = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--user", "--quiet", "uv"], check=False
    )
    found = _find_uv() if pip_user.returncode == 0 else None
    if found:
        return found
    _say(f"installing uv into a private virtual environment {TOOLS_DIR.name}/")
    venv.EnvBuilder(with_pip=True, clear=True).create(TOOLS_DIR)
    tools_python = TOOLS_DIR / ("Scripts" if os.name == "nt" else "bin") / "python"
    subprocess.run([str(tools_python), "-m", "pip", "install", "--quiet", "uv"], check=True)
    found = _find_uv()
    if not found:
        raise SystemExit("[dev] could not install uv; see https://docs.astral.sh/uv/")
    return found


# Checks are (name, command) or (name, command, environment overrides).
Check = tuple[str, list[str]] | tuple[str, list[str], dict[str, str]]

# The suites that also run on PostgreSQL (their servers honour DEX_TEST_DATABASE).
POSTGRES_SUITES = ("sdk", "server", "agents/python/core")


def _run(cmd: Sequence[str], env: dict[str, str] | None = None) -> int:
    prefix = "".join(f"{k}={v} " for k, v in (env or {}).items())
    _say("$ " + prefix + " ".join(cmd))
    full_env = {**os.environ, **env} if env else None
    return subprocess.run(list(cmd), cwd=ROOT, check=False, env=full_env).returncode


def sync(uv: str) -> None:
    """Install the locked dependencies of the whole workspace."""
    if _run([uv, "sync", "--locked"]) != 0:
        raise SystemExit("[dev] `uv sync --locked` failed")


def demo_hello_flow(uv: str) -> int:
    """Run ``examples/hello_flow``: a Flow that survives a Worker killed mid-Step."""
    return _run([uv, "run", "python", "examples/hello_flow/run.py"])


def demo_support_desk(uv: str) -> int:
    """Run ``examples/support_desk``: an agent session survives a Worker killed mid-approval."""
    return _run([uv, "run", "python", "examples/support_desk/run.py"])


# The demo the README's first command runs. Point it at another function to change it.
DEMO: Callable[[str], int] = demo_support_desk


def package_checks() -> list[tuple[str, list[str]]]:
    """Every package's ``ci.sh``, in dependency order, then adapters as they appear."""
    fixed = ["sdk/ci.sh", "server/ci.sh", "agents/python/core/ci.sh"]
    adapters = sorted(
        str(p.relative_to(ROOT)) for p in ROOT.glob("agents/python/*/ci.sh") if p.is_file()
    )
    scripts = fixed + [a for a in adapters if a not in fixed]
    return [(str(Path(s).parent), ["bash", s]) for s in scripts if (ROOT / s).is_file()]


def postgres_checks(uv: str) -> list[Check]:
    """The engine and dex-agents test suites again, each server on a fresh PostgreSQL DB."""
    wanted = os.environ.get("DEX_TEST_DATABASES", "sqlite,postgres").split(",")
    if "postgres" not in [w.strip() for w in wanted]:
        return []
    env = {"DEX_TEST_DATABASE": "postgres"}
    return [
        (
            f"{suite} on PostgreSQL",
            [uv, "run", "--project", str(ROOT), "pytest", "-q", "--rootdir", suite, suite],
            env,
        )
        for suite in POSTGRES_SUITES
        if (ROOT / suite).is_dir()
    ]


def root_checks(uv: str) -> list[tuple[str, list[str]]]:
    """Lint the whole tree and type-check what no package's ``ci.sh`` covers."""
    loose = [p for p in ("scripts", "examples", "bench") if (ROOT / p).is_dir()]
    checks = [("root ruff check", [uv, "run", "ruff", "check", "."])]
    if loose:
        checks.append(("root ruff format", [uv, "run", "ruff", "format", "--check", *loose]))
    # Each example is its own set of top-level modules (run.py, worker.py, ...): one mypy
    # run per example keeps equal names in different examples apart.
    # An adapter's example (examples/<adapter>_support_desk) imports its framework, which
    # only the adapter's own venv has: the adapter's ci.sh type-checks it instead.
    adapters = {p.parent.name for p in ROOT.glob("agents/python/*/ci.sh")}
    examples = sorted(
        str(p.relative_to(ROOT))
        for p in ROOT.glob("examples/*")
        if p.is_dir() and p.name.removesuffix("_support_desk") not in adapters
    )
    for target in [*(p for p in ("scripts", "bench") if (ROOT / p).is_dir()), *examples]:
        mypy = [uv, "run", "mypy", "--config-file", "pyproject.toml", target]
        checks.append((f"root mypy {target}", mypy))
    return checks


# The workspace packages (built with ``uv build --package``) and where their sources live.
WORKSPACE_PACKAGES = (
    ("dex-sdk", "sdk"),
    ("dex-server", "server"),
    ("dex-agents", "agents/python/core"),
)
DIST_DIR = ROOT / "dist"


def adapter_dirs() -> list[Path]:
    """The framework adapters: their own uv projects under ``agents/python/``."""
    core = ROOT / "agents/python/core"
    return sorted(p.parent for p in ROOT.glob("agents/python/*/pyproject.toml") if p.parent != core)


def build(uv: str, out_dir: Path = DIST_DIR, *, sdists: bool = True) -> int:
    """Build a wheel (and an sdist) of every package into ``out_dir`` and check the wheels.

    Each wheel must hold every file of its package's source folder that is not Python
    (SQL migrations, ``py.typed``, assets), so an installed package runs as it does here.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    kinds = [] if sdists else ["--wheel"]
    builds = [
        [uv, "build", "--package", name, "--out-dir", str(out_dir)]
        for name, _ in WORKSPACE_PACKAGES
    ]
    builds += [[uv, "build", str(d), "--out-dir", str(out_dir)] for d in adapter_dirs()]
    for cmd in builds:
        if _run([*cmd, *kinds, "--quiet"]) != 0:
            return 1
    problems = check_wheels(out_dir)
    for problem in problems:
        _say(f"wheel problem: {problem}")
    wheels = sorted(p.name for p in out_dir.glob("*.whl"))
    _say(f"built {len(wheels)} wheels into {out_dir}: {', '.join(wheels)}")
    return 1 if problems else 0


def _source_packages(project: Path) -> list[Path]:
    return sorted(p.parent for p in (project / "src").glob("*/__init__.py"))


def check_wheels(out_dir: Path) -> list[str]:
    """Name every runtime file of a package's sources that its wheel lacks."""
    import zipfile

    projects = [ROOT / d for _, d in WORKSPACE_PACKAGES] + adapter_dirs()
    problems: list[str] = []
    for project in projects:
        for package in _source_packages(project):
            matches = sorted(out_dir.glob(f"{_dist_name(project)}-*.whl"))
            if not matches:
                problems.append(f"no wheel for {project.relative_to(ROOT)}")
                continue
            names = set(zipfile.ZipFile(matches[-1]).namelist())
            for path in package.rglob("*"):
                if path.is_dir() or "__pycache__" in path.parts or path.suffix == ".pyc":
                    continue
                inside = path.relative_to(package.parent).as_posix()
                if inside not in names:
                    problems.append(f"{matches[-1].name} lacks {inside}")
    return problems


def _dist_name(project: Path) -> str:
    import tomllib

    name = tomllib.loads((project / "pyproject.toml").read_text())["project"]["name"]
    return str(name).replace("-", "_")


def check_wheels_outside(uv: str) -> int:
    """Build the wheels, install them in a fresh venv outside the repo, run an agent there.

    The venv lives in a temporary folder; pip installs the wheels of the SDK, the server,
    dex-agents and the Pydantic AI adapter (their dependencies from the package index).
    ``scripts/_wheel_smoke.py``, run from an empty folder by that venv's Python, starts
    ``dexcli dev`` and an agent session of the scripted model and one of Pydantic AI.
    """
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="dex-wheels-"))
    try:
        dist = work / "dist"
        _say(f"building the wheels into {dist}")
        if build(uv, dist, sdists=False) != 0:
            return 1
        _say(f"creating an empty virtual environment in {work / 'venv'}")
        try:
            venv.EnvBuilder(with_pip=True, clear=True).create(work / "venv")
        except (OSError, subprocess.CalledProcessError):
            # A Python without ensurepip (Debian without python3-venv): uv seeds pip instead.
            seeded = [uv, "venv", "--seed", "--python", sys.executable, str(work / "venv")]
            if _run(seeded) != 0:
                return 1
        bin_dir = work / "venv" / ("Scripts" if os.name == "nt" else "bin")
        names = [name for name, _ in WORKSPACE_PACKAGES] + [WHEEL_CHECK_ADAPTER]
        wheels = [str(next(dist.glob(f"{name.replace('-', '_')}-*.whl"))) for name in names]
        _say("pip install " + " ".join(Path(w).name for w in wheels))
        env = {k: v for k, v in os.environ.items() if k not in _REPO_ENV}
        pip = [
            str(bin_dir / "python"),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--quiet",  # twice: errors only
            "--disable-pip-version-check",
            "--no-compile",
        ]
        if subprocess.run([*pip, *wheels], cwd=work, env=env, check=False).returncode != 0:
            _say("pip install of the wheels failed")
            return 1
        app = work / "app"
        app.mkdir()
        shutil.copy(ROOT / "scripts" / "_wheel_smoke.py", app / "wheel_smoke.py")
        _say(f"running an agent session from the wheels in {app}")
        smoke = [str(bin_dir / "python"), "wheel_smoke.py", "--pydantic-ai"]
        code = subprocess.run(smoke, cwd=app, env=env, check=False, timeout=300).returncode
        verdict = "passed" if code == 0 else "FAILED"
        _say(f"wheel check {verdict} in {time.monotonic() - started:.1f}s")
        return code
    finally:
        shutil.rmtree(work, ignore_errors=True)


# The adapter the wheel check installs and runs too (the lightest framework of the three).
WHEEL_CHECK_ADAPTER = "dex-agents-pydantic-ai"
# Variables that would point the venv's Python back at this repository or its venv.
_REPO_ENV = frozenset(
    {"PYTHONPATH", "VIRTUAL_ENV", "UV_PROJECT_ENVIRONMENT", "DEXCLI", "PYTHONHOME"}
)


def wheel_checks() -> list[tuple[str, list[str]]]:
    """The wheel check, as its own ``scripts/dev.py check-wheels`` run."""
    return [
        ("wheels outside the repo", [sys.executable, str(ROOT / "scripts/dev.py"), "check-wheels"])
    ]


def failure_digest(output: str, most: int = 20) -> list[str]:
    """The lines of a failed check's output that name what failed.

    pytest's ``FAILED``/``ERROR`` summary lines when there are any (at most ``most``, each
    cut to 300 characters), else the output's last lines.
    """
    lines = output.splitlines()
    named = [line for line in lines if line.startswith(("FAILED ", "ERROR "))]
    picked = named[:most] if named else lines[-most:]
    return [line[:300] for line in picked]


def _run_captured(check: Check, log: Path) -> tuple[bool, float | None]:
    """Run one check, output to ``log``: whether it passed, and its CPU seconds if known."""
    cmd = check[1]
    env = check[2] if len(check) == 3 else None
    full_env = {**os.environ, **env} if env else None
    prefix = "".join(f"{k}={v} " for k, v in (env or {}).items())
    with log.open("w") as out:
        out.write(f"$ {prefix}{' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.Popen(
            list(cmd), cwd=ROOT, env=full_env, stdout=out, stderr=subprocess.STDOUT
        )
        if not hasattr(os, "wait4"):
            return proc.wait() == 0, None
        # wait4 also tells the CPU time of the check and of every process it waited for,
        # which shows how busy the lanes keep the machine.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode == 0, usage.ru_utime + usage.ru_stime


# Rough wall seconds of each check on a two-core machine with every lane busy. Only the
# order matters: the longest checks start first, so the short ones fill the gaps at the end.
# A root check not listed counts as 15 s, any other as a minute.
_EXPECTED_SECONDS = {
    "server": 840,
    "server on PostgreSQL": 570,
    "agents/python/core on PostgreSQL": 495,
    "agents/python/core": 440,
    "sdk on PostgreSQL": 390,
    "sdk": 315,
    "agents/python/langgraph": 300,
    "agents/python/claude-agent-sdk": 280,
    "agents/python/openai-agents": 265,
    "agents/python/pydantic-ai": 255,
    "wheels outside the repo": 70,
}


def _unit_seconds(unit: Sequence[Check]) -> float:
    def seconds(name: str) -> float:
        return _EXPECTED_SECONDS.get(name, 15.0 if name.startswith("root ") else 60.0)

    return sum(seconds(check[0]) for check in unit)


def lanes(checks: Sequence[Check], count: int) -> list[list[Check]]:
    """Group ``checks`` into units that each run in their own order, longest unit first.

    ``test`` runs the units on ``count`` lanes side by side: a lane that finishes a unit
    takes the next one not yet started, so the lanes end close together however long each
    check turns out to be. The root checks form one unit, since their mypy runs share the
    repository's ``.mypy_cache``; every other check is a unit of its own (each ``ci.sh``
    runs mypy in its package's folder, on a cache of its own). ``count <= 1`` gives one
    unit holding every check in the given order.
    """
    if count <= 1:
        return [list(checks)]
    root = [c for c in checks if c[0].startswith("root ")]
    units = [[c] for c in checks if not c[0].startswith("root ")]
    if root:
        units.append(root)
    return sorted(units, key=_unit_seconds, reverse=True)


def _lane_count() -> int:
    raw = os.environ.get("DEX_TEST_LANES", "").strip()
    if not raw:
        return _DEFAULT_LANES
    try:
        count = int(raw)
    except ValueError:
        raise SystemExit(f"[dev] DEX_TEST_LANES must be a whole number, got {raw!r}") from None
    if count < 1:
        raise SystemExit(f"[dev] DEX_TEST_LANES must be at least 1, got {count}")
    return count


# How many checks run at once by default (DEX_TEST_LANES overrides it). The suites spend
# part of their time waiting (polls, the scenarios' own pauses): measured as CPU seconds
# over wall seconds, one suite keeps 0.65 to 1 core busy, so two lanes left about a quarter
# of two cores idle; three fill them.
_DEFAULT_LANES = 3


def test(uv: str) -> int:
    """Run every check (all of them, even after a failure) in lanes and print a summary.

    ``DEX_TEST_LANES`` checks run side by side (default 3; 1 runs everything one after
    another), each lane taking the next unit of :func:`lanes` when it is free. Each check's
    output is printed whole when it ends, so lanes never interleave lines.
    """
    checks: list[Check] = [*package_checks(), *postgres_checks(uv), *root_checks(uv)]
    checks += wheel_checks()
    count = _lane_count()
    results: dict[str, tuple[bool, float, float | None]] = {}
    digests: dict[str, list[str]] = {}
    printing = threading.Lock()
    logs = Path(tempfile.mkdtemp(prefix="dex-test-logs-"))
    queue = list(lanes(checks, count))
    began = time.monotonic()
    taking = threading.Lock()

    def next_unit() -> list[Check] | None:
        with taking:
            return queue.pop(0) if queue else None

    def run_lane(lane: int) -> None:
        while (unit := next_unit()) is not None:
            for check in unit:
                name = check[0]
                with printing:
                    _say(f"=== {name} (started)")
                started = time.monotonic()
                log = logs / f"{lane}-{len(results)}-{time.monotonic_ns()}.log"
                ok, cpu = _run_captured(check, log)
                seconds = time.monotonic() - started
                results[name] = (ok, seconds, cpu)
                output = log.read_text(errors="replace")
                if not ok:
                    digests[name] = failure_digest(output)
                with printing:
                    _say(f"=== {name}: {'PASS' if ok else 'FAIL'} in {seconds:.1f}s")
                    sys.stdout.write(output)
                    sys.stdout.flush()

    threads = [threading.Thread(target=run_lane, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    shutil.rmtree(logs, ignore_errors=True)
    wall = time.monotonic() - began
    print()
    for check in checks:
        ok, seconds, cpu = results[check[0]]
        busy = f", cpu {cpu:.1f}s" if cpu is not None else ""
        print(f"  {'PASS' if ok else 'FAIL'}  {check[0]}  ({seconds:.1f}s{busy})")
    cpus = [cpu for _, _, cpu in results.values() if cpu is not None]
    if cpus:
        total = sum(cpus)
        lanes_used = f"{count} lane{'s' if count != 1 else ''}"
        print(f"{lanes_used}: {wall:.1f}s, cpu {total:.1f}s ({total / wall:.2f} cores busy)")
    # the failures again at the very end, where a truncated log still shows them
    for name, lines in digests.items():
        print(f"{name} failed:")
        for line in lines:
            print(f"    {line}")
    passed = sum(1 for ok, _, _ in results.values() if ok)
    failed = len(results) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line and run ``demo`` or ``test``."""
    parser = argparse.ArgumentParser(
        prog="scripts/dev.py", description="Run the demo or the tests."
    )
    parser.add_argument("command", choices=["demo", "test", "build", "check-wheels"])
    args = parser.parse_args(argv)
    # The demo and the suites start hundreds of Python processes (servers, Workers,
    # dexcli); with bytecode caching off, each one compiles every module it imports from
    # source again, which was over half of a dexcli call's time. Let them cache it.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    uv = ensure_uv()
    if args.command == "build":
        return build(uv)
    if args.command == "check-wheels":
        return check_wheels_outside(uv)
    sync(uv)
    if args.command == "demo":
        return DEMO(uv)
    return test(uv)


if __name__ == "__main__":
    sys.exit(main())
