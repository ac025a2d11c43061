"""The guide's "Running an agent" sample, as written, against a private server.

The sample's Worker and Client run in this process. Its literal address
``"localhost:8801"`` is replaced by the private server's address, and ``.dex-cache`` is
created in the test's temporary directory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dex_agents.testing import AgentTestStack

# isort: off
# The guide's import lines.
from dex import AsyncClient, AsyncWorker, BlobCacheConfig, ClientOptions, Registry
from dex import WorkerOptions, open_blob_cache
from dex_agents import AgentSessionClient, AgentSessionFlow, AgentSessionOptions
from dex_agents import ToolEffect, ToolPolicy
# isort: on

from tests.agent_helpers import wait_idle
from tests.my_agent import FINAL_USAGE, MyFrameworkRunner, build_agent, build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]


async def test_running_an_agent_as_the_guide_writes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    async with AgentTestStack(tmp_path, [build_flow()], "tests.my_worker") as stack:
        server_address = stack.server_address  # the guide's "localhost:8801"
        agent = build_agent()

        flow = AgentSessionFlow(
            MyFrameworkRunner(agent),
            flow_type="TriageAgent",
            options=AgentSessionOptions(
                tool_policies={"search_tickets": ToolPolicy(ToolEffect.READ)},
            ),
        )
        registry = Registry([flow], allow_async_handlers=True)
        cache = open_blob_cache(BlobCacheConfig(".dex-cache", 64 * 1024 * 1024))
        worker = AsyncWorker(registry, cache, WorkerOptions(server_address=server_address))
        client = AsyncClient(registry, cache, ClientOptions(server_address=server_address))

        serving = asyncio.create_task(worker.start())
        try:
            await worker.wait_pull_registered(30)

            sessions = AgentSessionClient(client, flow)
            await sessions.start_session("session-42", "Find my open tickets")
            snapshot = await sessions.get_agent_snapshot("session-42")

            # Beyond the sample: the session started, and its turn runs to the end.
            assert snapshot.session_id == "session-42"
            done = await wait_idle(sessions, "session-42", turns=1)
            assert done.messages[-1].text == "search_tickets: succeeded: 3 open tickets for me"
            assert done.usage == FINAL_USAGE
            assert (tmp_path / ".dex-cache").is_dir()
        finally:
            await worker.stop()
            await asyncio.wait_for(serving, timeout=30)
            await client.close()
