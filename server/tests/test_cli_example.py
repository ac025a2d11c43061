"""The README's demo (examples/hello_flow) runs to the end and proves its claim."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_hello_flow_demo_survives_a_killed_worker() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "hello_flow" / "run.py")],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "SIGKILL" in out
    assert "OK: every Step completed exactly once" in out
    assert "flow history" in out
    assert "StepExecuteCompleted" in out  # the history table the demo prints
