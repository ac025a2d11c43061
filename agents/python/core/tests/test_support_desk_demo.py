from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
DEMO = ROOT / "examples" / "support_desk" / "run.py"


async def test_the_support_desk_demo_runs_and_nothing_runs_twice() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DEMO),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=90)
    text = output.decode()
    assert process.returncode == 0, text
    assert "SIGKILL Worker #1" in text
    assert "nothing ran twice" in text
    assert "refund of $249 issued for order 1042" in text
    assert "flow history support-1042" in text
