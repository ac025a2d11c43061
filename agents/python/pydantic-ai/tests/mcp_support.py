"""The MCP test server of dex-agents core (``core/tests/mcp_server.py``), over HTTP."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from dex_agents import MCPToolSource
from dex_agents.testing._process import ChildProcess

SERVER_SCRIPT = Path(__file__).resolve().parents[2] / "core" / "tests" / "mcp_server.py"
URL_ENV = "MCP_TEST_URL"
STATE_DIR_ENV = "MCP_TEST_STATE_DIR"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@asynccontextmanager
async def mcp_http_server(state_dir: Path) -> AsyncIterator[str]:
    """Run the server as a child process; yield its URL once it lists its tools."""
    port = _free_port()
    env = {**os.environ, STATE_DIR_ENV: str(state_dir)}
    child = ChildProcess(
        [sys.executable, str(SERVER_SCRIPT), "http", str(port)],
        log_path=state_dir / "mcp_http.log",
        env=env,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while True:
            try:
                await MCPToolSource.http(url, read_timeout_seconds=5).list_tools()
                break
            except Exception:
                if loop.time() > deadline or not child.is_running():
                    raise AssertionError(child.log_tail()) from None
                await asyncio.sleep(0.2)
        yield url
    finally:
        await child.stop()
