"""Worker child of the approval tests; its clock may be shifted to prove it is not used."""

from __future__ import annotations

import os
import time
from pathlib import Path

from dex_agents.testing import run_agent_worker

from tests.approval_defs import CLOCK_OFFSET_ENV, STATE_DIR_ENV, build_flows

if __name__ == "__main__":
    offset = float(os.environ.get(CLOCK_OFFSET_ENV, "0"))
    if offset:
        real_time = time.time
        # Only wall-clock reads move; monotonic time (leases, polling) stays correct.
        time.time = lambda: real_time() + offset
    run_agent_worker(list(build_flows(Path(os.environ[STATE_DIR_ENV])).values()))
