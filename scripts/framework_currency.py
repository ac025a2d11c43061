#!/usr/bin/env python3
"""Run each framework adapter's tests against the newest release of its framework.

Usage::

    python3 scripts/framework_currency.py                       # every adapter
    python3 scripts/framework_currency.py --adapter langgraph   # one of them
    python3 scripts/framework_currency.py --keep                # keep the copies

The adapters' CI runs each suite on the versions its ``uv.lock`` pins. This script answers
the other question: does the adapter still work with what the package index serves today?
For each adapter it asks the index (PyPI's JSON API, ``--index-url`` to change it) for the
newest release of each framework package, copies the adapter with the packages it builds
on (``sdk``, ``server``, ``agents/python/core``, the shared ``adapter_tests``, ``docs``,
whose guides the tests run, and the adapter's example) into a temporary folder, pins the
framework packages there to those releases, lets ``uv`` lock and install the copy, and
runs the adapter's tests. The repository's own files and lock files are never touched.

It prints progress while it works, then a table (adapter, locked and newest versions,
result with counts) and one last line
``framework_currency adapters=N passed=P failed=F``. It exits non-zero when an adapter
failed or could not be installed. It needs the network (the index) and takes several
minutes per adapter, so it is a scheduled job, not part of ``scripts/dev.py test``.

Standard library only, like ``scripts/dev.py`` (whose ``ensure_uv`` it uses).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dev import ROOT, ensure_uv

# The framework packages of each adapter: the ones the script moves to their newest release.
ADAPTERS: dict[str, tuple[str, ...]] = {
    "pydantic-ai": ("pydantic-ai-slim",),
    "openai-agents": ("openai-agents",),
    "langgraph": ("langgraph", "langchain", "langchain-core"),
    "claude-agent-sdk": ("claude-agent-sdk",),
}
# What an adapter's tests need from the repository besides the adapter itself.
SUPPORT_PATHS = (
    "pyproject.toml",
    "uv.lock",
    "sdk",
    "server",
    "agents/python/core",
    "agents/python/adapter_tests",
    "docs",
)
SKIPPED = shutil.ignore_patterns(
    ".venv", "__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache", "dist", "*.pyc"
)
DEFAULT_INDEX = "https://pypi.org"
# Several servers, Workers and CLIs per test: a whole suite takes minutes.
TEST_TIMEOUT_SECONDS = 3600
_COUNTS = re.compile(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)")


def say(message: str) -> None:
    """Print one progress line."""
    print(f"[currency] {message}", flush=True)


@dataclass
class Outcome:
    """What one adapter's run found."""

    adapter: str
    locked: dict[str, str] = field(default_factory=dict)
    newest: dict[str, str] = field(default_factory=dict)
    ok: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    detail: str = ""

    def result(self) -> str:
        """``passed``/``failed`` with the test counts, or why no test ran."""
        if not self.counts:
            return f"failed ({self.detail})" if self.detail else "failed"
        counts = ", ".join(f"{n} {kind}" for kind, n in self.counts.items())
        return f"{'passed' if self.ok else 'failed'} ({counts})"


def locked_versions(adapter_dir: Path, packages: Sequence[str]) -> dict[str, str]:
    """The versions of ``packages`` in the adapter's ``uv.lock`` ("?" when absent)."""
    lock = tomllib.loads((adapter_dir / "uv.lock").read_text())
    versions = {str(p["name"]): str(p.get("version", "?")) for p in lock.get("package", [])}
    return {name: versions.get(name, "?") for name in packages}


def newest_version(package: str, index_url: str) -> str:
    """The newest release (not a pre-release) the index lists for ``package``."""
    url = f"{index_url.rstrip('/')}/pypi/{package}/json"
    with urllib.request.urlopen(url, timeout=60) as response:
        payload = json.load(response)
    return str(payload["info"]["version"])


def pin(pyproject: str, package: str, version: str) -> str:
    """Rewrite every requirement on ``package`` in ``pyproject`` to ``==version``.

    Extras and markers are kept; other packages whose names start the same
    (``langchain-core`` for ``langchain``) are left alone.
    """
    requirement = re.compile(
        r'"'
        + re.escape(package)
        + r'(?P<extras>\[[^\]]*\])?\s*(?:[<>=!~][^";]*)?(?P<marker>;[^"]*)?"'
    )

    def replace(match: re.Match[str]) -> str:
        return f'"{package}{match["extras"] or ""}=={version}{match["marker"] or ""}"'

    return requirement.sub(replace, pyproject)


def copy_tree(workdir: Path, adapter: str) -> Path:
    """Copy the adapter and what its tests need into ``workdir``; the adapter's copy."""
    # The adapter's example, when it has one, is run by its tests too.
    own = (f"agents/python/{adapter}", f"examples/{adapter}_support_desk")
    for relative in (*SUPPORT_PATHS, *own):
        source = ROOT / relative
        target = workdir / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=SKIPPED)
        elif source.is_file():
            shutil.copy2(source, target)
    return workdir / "agents/python" / adapter


def run_logged(cmd: Sequence[str], cwd: Path, log: Path, env: dict[str, str]) -> int:
    """Run ``cmd``, its output to ``log``; echo pytest's progress lines as they come."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        process = subprocess.Popen(
            list(cmd), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            out.write(line)
            out.flush()
            if re.search(r"\[\s*\d+%\]$", line.rstrip()):
                say(f"  {cwd.name}: {line.rstrip()}")
        return process.wait(timeout=TEST_TIMEOUT_SECONDS)


def check_adapter(uv: str, adapter: str, index_url: str, workdir: Path) -> Outcome:
    """Copy one adapter, move it to its framework's newest release and run its tests."""
    packages = ADAPTERS[adapter]
    outcome = Outcome(adapter, locked=locked_versions(ROOT / "agents/python" / adapter, packages))
    try:
        outcome.newest = {name: newest_version(name, index_url) for name in packages}
    except (OSError, KeyError, ValueError) as exc:
        outcome.detail = f"the index did not answer: {exc}"
        return outcome
    say(f"{adapter}: locked {outcome.locked}, newest {outcome.newest}")
    copy = copy_tree(workdir / adapter, adapter)
    pyproject = (copy / "pyproject.toml").read_text()
    for name, version in outcome.newest.items():
        pyproject = pin(pyproject, name, version)
    (copy / "pyproject.toml").write_text(pyproject)
    log = workdir / f"{adapter}.log"
    env = {
        k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    }
    say(f"{adapter}: locking and installing the copy in {copy} (log {log})")
    upgrades = [arg for name in packages for arg in ("--upgrade-package", name)]
    if run_logged([uv, "lock", *upgrades], copy, log, env) != 0:
        outcome.detail = "no resolution with the newest versions"
        show_failures(log)
        return outcome
    if run_logged([uv, "sync", "--locked"], copy, log, env) != 0:
        outcome.detail = "install failed"
        show_failures(log)
        return outcome
    installed = locked_versions(copy, packages)
    if installed != outcome.newest:
        outcome.detail = f"uv installed {installed}, not the newest"
        return outcome
    say(f"{adapter}: running its tests")
    env["DEXCLI"] = str(copy / ".venv" / "bin" / "dexcli")
    env["PYTHONUNBUFFERED"] = "1"  # pytest's per-test lines as they happen
    cmd = [uv, "run", "--locked", "pytest", "-v", "-p", "no:cacheprovider"]
    code = run_logged(cmd, copy, log, env)
    summary = [line for line in log.read_text().splitlines() if _COUNTS.search(line)]
    if summary:
        outcome.counts = {kind: int(n) for n, kind in _COUNTS.findall(summary[-1])}
    outcome.ok = code == 0
    if not outcome.ok:
        outcome.detail = f"pytest exited {code}"
        show_failures(log)
    say(f"{adapter}: {outcome.result()}")
    return outcome


def show_failures(log: Path) -> None:
    """Print pytest's short summary (or the log's end) so a failure is readable here."""
    lines = log.read_text().splitlines()
    marks = [i for i, line in enumerate(lines) if "short test summary info" in line]
    shown = lines[marks[-1] :] if marks else lines[-40:]
    for line in shown:
        print(f"    {line}", flush=True)


def keep_logs(workdir: Path, failed: Sequence[str]) -> None:
    """Save the logs of the adapters that failed before the copies are removed."""
    logs = [workdir / f"{name}.log" for name in failed if (workdir / f"{name}.log").is_file()]
    if not logs:
        return
    folder = Path(tempfile.mkdtemp(prefix="dex-currency-logs-"))
    for log in logs:
        shutil.copy2(log, folder / log.name)
    say(f"logs of the failed adapters: {folder}")


def versions(found: dict[str, str]) -> str:
    """``name version`` pairs, comma-separated."""
    return ", ".join(f"{name} {version}" for name, version in found.items()) or "?"


def print_table(outcomes: Sequence[Outcome]) -> None:
    """The result table, one row per adapter."""
    rows = [("adapter", "locked", "newest", "result")]
    rows += [(o.adapter, versions(o.locked), versions(o.newest), o.result()) for o in outcomes]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, check the adapters and print the summary."""
    parser = argparse.ArgumentParser(
        prog="scripts/framework_currency.py",
        description="Run the adapters' tests against the newest framework releases.",
    )
    parser.add_argument(
        "--adapter",
        action="append",
        choices=sorted(ADAPTERS),
        help="check only this adapter (repeat for several)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary copies")
    parser.add_argument("--index-url", default=DEFAULT_INDEX, help="index with a PyPI JSON API")
    args = parser.parse_args(argv)
    uv = ensure_uv()
    names = list(dict.fromkeys(args.adapter)) if args.adapter else list(ADAPTERS)
    workdir = Path(tempfile.mkdtemp(prefix="dex-currency-"))
    say(f"working in {workdir}")
    outcomes: list[Outcome] = []
    try:
        for name in names:
            outcomes.append(check_adapter(uv, name, args.index_url, workdir))
    finally:
        if args.keep:
            say(f"kept {workdir}")
        else:
            keep_logs(workdir, [o.adapter for o in outcomes if not o.ok])
            shutil.rmtree(workdir, ignore_errors=True)
    print()
    print_table(outcomes)
    passed = sum(1 for o in outcomes if o.ok)
    failed = len(outcomes) - passed
    print(f"framework_currency adapters={len(outcomes)} passed={passed} failed={failed}")
    return 0 if passed == len(outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
