"""Worker child of test_shapes: serves the shape named in its environment."""

from __future__ import annotations

from dex_agents.testing import run_agent_worker

from tests.shape_defs import flow_from_env

if __name__ == "__main__":
    run_agent_worker([flow_from_env()])
