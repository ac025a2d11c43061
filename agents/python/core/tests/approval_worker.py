"""Worker child of the approval tests; its agent clock may be shifted to prove it unused.

With ``APPROVAL_TEST_CLOCK_OFFSET_S`` set, every ``dex_agents`` module reads a wall clock
shifted by that many seconds. The SDK's own clock is left alone: it times out tasks by
the deadlines the server sends, so a shifted SDK clock would drop every task.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
import time
import types
from pathlib import Path

import dex_agents
from dex_agents.testing import run_agent_worker

from tests.approval_defs import CLOCK_OFFSET_ENV, STATE_DIR_ENV, build_flows


def shift_agent_clock(offset: float) -> None:
    shifted = types.SimpleNamespace(**{n: getattr(time, n) for n in dir(time) if n[0] != "_"})
    shifted.time = lambda: time.time() + offset
    for info in pkgutil.walk_packages(dex_agents.__path__, "dex_agents."):
        importlib.import_module(info.name)
    for name, module in list(sys.modules.items()):
        if name.startswith("dex_agents") and getattr(module, "time", None) is time:
            module.time = shifted  # type: ignore[attr-defined]


if __name__ == "__main__":
    offset = float(os.environ.get(CLOCK_OFFSET_ENV, "0"))
    if offset:
        shift_agent_clock(offset)
    run_agent_worker(list(build_flows(Path(os.environ[STATE_DIR_ENV])).values()))
