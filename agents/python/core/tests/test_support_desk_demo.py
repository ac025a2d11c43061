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
    expected = [
        "SIGKILL Worker #1",
        "in the middle of the model call",
        "RunModel-1#2",  # the killed model call ran again as attempt 2
        "SIGKILL Worker #2",
        "while the three tool calls run",
        "CallTool-1#2",  # the read and the idempotent write ran again
        "CallTool-2#2",
        "finished text_customer: outcome_unknown",
        "The outcome of this tool call is unknown",  # what the model was told
        "I could not confirm that my text reached you",
        "SIGKILL Worker #3",
        "while the session waits",
        "run again with the same key support-1042/turn-1/call-0-1",
        "the ticket holds 1 note",
        "nothing that must not repeat ran twice",
        "refund of $249 issued for order 1042",
        "flow history support-1042",
    ]
    missing = [line for line in expected if line not in text]
    # the whole output on a failure: a line the live view did not print is read in context
    assert not missing, f"missing {missing} in the demo's output:\n{text}"
