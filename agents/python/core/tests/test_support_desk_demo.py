from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
DEMO = ROOT / "examples" / "support_desk" / "run.py"


@pytest.mark.timeout(200)
async def test_the_support_desk_demo_survives_kills_mid_call_and_mid_approval() -> None:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(DEMO),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "COLUMNS": "200"},
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=180)
    text = output.decode()
    # The demo exits non-zero when a call count or a stored effect is not the expected one.
    assert process.returncode == 0, text
    assert "SIGKILL Worker #1" in text and "in the middle of the model call" in text
    assert "RunModel-1#2" in text  # the killed model call ran again as attempt 2
    assert "SIGKILL Worker #2" in text and "while the three tool calls run" in text
    assert "CallTool-1#2" in text and "CallTool-2#2" in text  # the read and the idempotent write
    assert "finished text_customer: outcome_unknown" in text
    assert "The outcome of this tool call is unknown" in text  # what the model was told
    assert "I could not confirm that my text reached you" in text
    assert "SIGKILL Worker #3" in text and "while the session waits" in text
    assert "run again with the same key support-1042/turn-1/call-0-1" in text
    assert "the ticket holds 1 note" in text
    assert "nothing that must not repeat ran twice" in text
    assert "refund of $249 issued for order 1042" in text
    assert "flow history support-1042" in text
