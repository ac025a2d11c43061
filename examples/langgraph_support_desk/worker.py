"""The support-desk Worker process (started, and killed, by run.py)."""

from __future__ import annotations

from agent import build_flow
from dex_agents.testing import run_agent_worker

if __name__ == "__main__":
    run_agent_worker([build_flow()])
