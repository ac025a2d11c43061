"""The LangGraph support-desk example runs offline and nothing in it runs twice."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import PACKAGE_DIR

EXAMPLE = PACKAGE_DIR.parents[2] / "examples" / "langgraph_support_desk" / "run.py"


def test_the_example_survives_a_worker_kill() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)],
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SIGKILL Worker" in done.stdout
    assert "nothing ran twice" in done.stdout
    assert "Done: refund of $249 issued for order 1042" in done.stdout
