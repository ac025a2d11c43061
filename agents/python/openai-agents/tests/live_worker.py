"""Worker child of the live test."""

from __future__ import annotations

import os
from pathlib import Path

from dex_agents.testing import run_agent_worker

from tests.agent_defs import STATE_DIR_ENV
from tests.test_live import live_flow

if __name__ == "__main__":
    run_agent_worker([live_flow(Path(os.environ[STATE_DIR_ENV]))])
