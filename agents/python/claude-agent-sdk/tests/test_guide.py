"""The "Build a durable agent" guide's Claude Agent SDK code, run as a reader would run it."""

from __future__ import annotations

from pathlib import Path

import pytest
from adapter_checks.guide import check_guide


# Three Python processes import the SDK, and every model call starts a CLI process.
@pytest.mark.timeout(300)
async def test_the_guide_runs_as_written(tmp_path: Path) -> None:
    await check_guide("build-claude-agent-sdk.md", tmp_path)
