"""An MCP server's tools in a LangGraph agent: effects, keys and questions, end to end."""

from __future__ import annotations

from pathlib import Path

from adapter_checks.mcp import check_mcp_agent

from tests.mcp_agent import build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]


async def test_mcp_tools_run_in_a_langgraph_agent(tmp_path: Path) -> None:
    await check_mcp_agent(tmp_path, build_flow, PACKAGE_DIR, "lg-mcp")
