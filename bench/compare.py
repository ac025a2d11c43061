"""Run one benchmark against two builds, interleaved, and print the ratio of every figure.

    uv run python bench/compare.py --a REV_OR_DIR --b REV_OR_DIR [--rounds 5]
                                   [--bench-from a|b|here] -- bench/step_overhead.py ARGS...

``REV_OR_DIR`` is a checkout directory, or any git revision of this repository (``main``,
``HEAD~3``, a commit): a revision is checked out with ``git worktree add --detach`` into a
temporary directory and given its own environment (``uv sync --all-packages --locked``);
both are removed at the end. Before the first round both builds and their environments get
their bytecode written (``compileall``), and the runs ignore ``PYTHONDONTWRITEBYTECODE``, so
neither build runs from source where the other runs from bytecode. Each round runs the
benchmark once on A and once on B, the order alternating between rounds so that drifting
machine load falls on both alike. A run
is ``uv run --project BUILD python SCRIPT ARGS`` with the working directory in ``BUILD``, so
the script imports that build's packages.

The script is taken from the current directory by default (``--bench-from here``), which
lets a new benchmark measure an old build; ``a`` or ``b`` take it from that build instead.
Every run's final line must be ``name key=value ...``; each numeric field gets a ratio
B / A per round, and the median over the rounds is printed in the final line::

    compare bench=step_overhead rounds=5 p50_ms=0.812 p95_ms=0.905 steps_per_s=1.150

(ratios: below 1 means B has the smaller figure). Non-numeric fields must agree between A
and B in every run, or the comparison stops.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent.parent


def parse_final_line(output: str) -> tuple[str, dict[str, str]]:
    """The benchmark name and its ``key=value`` fields from the last non-empty line."""
    lines = [ln for ln in output.splitlines() if ln.strip()]
    if not lines:
        raise SystemExit("the benchmark printed nothing")
    name, *pairs = lines[-1].split()
    fields = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"not a name=value line: {lines[-1]!r}")
        fields[key] = value
    return name, fields


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def ratios(a: dict[str, str], b: dict[str, str]) -> dict[str, float]:
    """B / A for every field numeric in both; other fields must be equal."""
    out: dict[str, float] = {}
    for key in a.keys() & b.keys():
        x, y = _number(a[key]), _number(b[key])
        if x is None or y is None:
            if a[key] != b[key]:
                raise SystemExit(f"field {key!r} differs: {a[key]!r} vs {b[key]!r}")
        elif x != 0:
            out[key] = y / x
    return out


def _env() -> dict[str, str]:
    # both builds run from their bytecode, whatever the caller's environment says
    drop = {"VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE"}
    return {k: v for k, v in os.environ.items() if k not in drop}


class Build:
    """A checkout to run the benchmark in: a directory as given, or a revision's worktree."""

    def __init__(self, spec: str, tmp: Path, label: str) -> None:
        self.spec = spec
        self.worktree: Path | None = None
        if Path(spec).is_dir():
            self.root = Path(spec).resolve()
            return
        self.root = tmp / label
        subprocess.run(
            ["git", "-C", str(_HERE), "worktree", "add", "--detach", str(self.root), spec],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        self.worktree = self.root
        print(f"{label}: {spec} checked out at {self.root}; syncing its environment", flush=True)
        subprocess.run(
            ["uv", "sync", "--all-packages", "--locked", "-q"], cwd=self.root, check=True
        )

    def compile(self) -> None:
        """Write the bytecode of the build and its environment before the first round.

        A fresh worktree has none, and with ``PYTHONDONTWRITEBYTECODE`` set (as on some
        machines) its processes would compile every module from source, which measured
        1.3 ms more Worker CPU per agent turn than the same build run from bytecode.
        """
        subprocess.run(
            ["uv", "run", "--project", str(self.root), "python", "-m", "compileall", "-q"]
            + ["-j", "0", "-x", r"/(\.git|node_modules)/", str(self.root)],
            cwd=self.root,
            env=_env(),
            stdout=subprocess.DEVNULL,
            check=False,  # a file that does not compile only costs its speed-up
        )

    def run(self, script: Path, args: list[str]) -> str:
        env = _env()
        proc = subprocess.run(
            ["uv", "run", "--project", str(self.root), "python", str(script), *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise SystemExit(
                f"the benchmark failed on {self.spec} (exit {proc.returncode}):\n"
                + proc.stdout[-2000:]
                + proc.stderr[-4000:]
            )
        return proc.stdout

    def remove(self) -> None:
        if self.worktree is not None:
            subprocess.run(
                ["git", "-C", str(_HERE), "worktree", "remove", "--force", str(self.worktree)],
                check=False,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description="A/B comparison of one Dex benchmark")
    parser.add_argument("--a", required=True, help="baseline: a checkout directory or revision")
    parser.add_argument("--b", required=True, help="candidate: a checkout directory or revision")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (default 5)")
    parser.add_argument(
        "--bench-from",
        choices=["here", "a", "b"],
        default="here",
        help="whose copy of the script to run (default: this checkout's)",
    )
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- SCRIPT [ARGS...]")
    args = parser.parse_args()
    command = args.bench[1:] if args.bench[:1] == ["--"] else args.bench
    if not command:
        raise SystemExit("give the benchmark after --, e.g. -- bench/step_overhead.py")
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if shutil.which("uv") is None:
        raise SystemExit("uv is not on PATH")
    tmp = Path(tempfile.mkdtemp(prefix="dex-compare-"))
    builds: list[Build] = []
    try:
        a = Build(args.a, tmp, "a")
        builds.append(a)
        b = Build(args.b, tmp, "b")
        builds.append(b)
        print("writing both builds' bytecode", flush=True)
        for build in builds:
            build.compile()
        source = {"here": Path.cwd(), "a": a.root, "b": b.root}[args.bench_from]
        script = (source / command[0]).resolve()
        if not script.is_file():
            raise SystemExit(f"no benchmark script at {script}")
        name = script.stem
        per_round: list[dict[str, float]] = []
        for r in range(args.rounds):
            order = [("a", a), ("b", b)] if r % 2 == 0 else [("b", b), ("a", a)]
            lines: dict[str, dict[str, str]] = {}
            for label, build in order:
                name, lines[label] = parse_final_line(build.run(script, command[1:]))
                shown = " ".join(f"{k}={v}" for k, v in lines[label].items())
                print(f"round {r + 1} {label}: {name} {shown}", flush=True)
            ratio = ratios(lines["a"], lines["b"])
            per_round.append(ratio)
            print(
                f"round {r + 1} b/a: " + " ".join(f"{k}={v:.3f}" for k, v in sorted(ratio.items())),
                flush=True,
            )
        keys = sorted(set.intersection(*(set(x) for x in per_round)))
        medians = {k: statistics.median(x[k] for x in per_round) for k in keys}
        print(
            f"compare bench={name} rounds={args.rounds} "
            + " ".join(f"{k}={v:.3f}" for k, v in medians.items())
        )
    finally:
        for build in builds:
            build.remove()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
