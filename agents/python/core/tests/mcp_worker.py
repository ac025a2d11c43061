"""Worker child of the MCP tests: serves the Flows of ``tests.mcp_defs``."""

from __future__ import annotations

from dex_agents.testing import run_agent_worker

from tests.mcp_defs import flows_from_env

if __name__ == "__main__":
    run_agent_worker(flows_from_env())
