"""Worker child of the Connector tests: serves the billing agent."""

from __future__ import annotations

from dex_agents.testing import run_agent_worker

from tests.connector_defs import flows_from_env

if __name__ == "__main__":
    run_agent_worker(flows_from_env())
