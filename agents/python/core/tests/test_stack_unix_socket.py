"""``AgentTestStack(unix_socket=True)``: the Workers reach the server through its Unix socket.

A real ``dexcli dev`` with ``--unix-socket`` and a Worker child given only the socket's
``unix://`` address run a session's turn; the server is restarted as a deploy does and the
Worker reconnects through the same socket path for the next turn.
"""

from __future__ import annotations

from pathlib import Path

from dex_agents.testing import AgentTestStack

from tests.agent_helpers import wait_idle
from tests.my_agent import build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]


async def test_workers_on_the_unix_socket_run_turns_across_a_server_restart(
    tmp_path: Path,
) -> None:
    flow = build_flow()
    async with AgentTestStack(
        tmp_path,
        [flow],
        "tests.my_worker",
        worker_cwd=PACKAGE_DIR,
        worker_env={"MY_STATE_DIR": str(tmp_path)},
        unix_socket=True,
    ) as stack:
        sessions = stack.sessions(flow)
        worker = await stack.start_worker()
        log = Path(worker.log_path).read_text()
        assert "(Unix socket " in log and "unix://" in log, log
        socket_dir = stack._socket_dir
        assert socket_dir is not None and (socket_dir / "dex.sock").exists()

        await sessions.start_session("unix-1", "Find my open tickets")
        first = await wait_idle(sessions, "unix-1", turns=1)
        assert first.messages[-1].text == "search_tickets: succeeded: 3 open tickets for me"

        await stack.restart_server()
        await sessions.start_session("unix-2", "Find my open tickets")
        second = await wait_idle(sessions, "unix-2", turns=1)
        assert second.messages[-1].text == "search_tickets: succeeded: 3 open tickets for me"
        assert worker.is_running()
    assert not socket_dir.exists()
