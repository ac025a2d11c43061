"""Dex Web's page times for a long agent session with a real history.

    uv run python bench/web_pages.py [--turns 500] [--rounds 5]

Starts a ``dexcli dev`` server and a Worker child serving the Dex Web browser tests'
scripted agent session (``server/tests/_web_agent.py``: no network, every message is
echoed), and runs ``--turns`` turns in one session, two stored messages each, so its
history holds every Step of every turn. Then it fetches the conversation page and the
run details page ``--rounds`` times each over HTTP and reports the best and the median
time of each. Target: the conversation page of a 1,000-message session under 1 s. The
last line is::

    web_pages messages=... history_events=... session_best_ms=... session_median_ms=...
        flow_best_ms=... flow_median_ms=... approvals_best_ms=...
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
SERVER_DIR = ROOT / "server"
sys.path.insert(0, str(SERVER_DIR))

from dex_agents import AgentSnapshot  # noqa: E402
from dex_agents.testing import AgentTestStack, wait_for_agent_snapshot  # noqa: E402

# the browser tests' scripted session (server/tests is no package of the workspace)
_agent: Any = importlib.import_module("tests._web_agent")
STATE_DIR_ENV: str = _agent.STATE_DIR_ENV
build_flow: Callable[[Path], Any] = _agent.build_flow

SESSION = "bench-long"


def _idle_after(turns: int) -> Callable[[AgentSnapshot], bool]:
    def probe(s: AgentSnapshot) -> bool:
        st = s.state
        return st is not None and st.turn_count >= turns and st.active_turn_id is None

    return probe


async def _times(client: httpx.AsyncClient, path: str, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        started = time.perf_counter()
        r = await client.get(path)
        out.append(time.perf_counter() - started)
        r.raise_for_status()
    return out


async def main(turns: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="dex-web-bench-") as tmp:
        state = Path(tmp) / "state"
        state.mkdir()
        flow = build_flow(state)
        async with AgentTestStack(
            tmp,
            [flow],
            "tests._web_agent",
            worker_cwd=SERVER_DIR,
            worker_env={STATE_DIR_ENV: str(state)},
        ) as stack:
            await stack.start_worker()
            sessions = stack.sessions(flow)
            await sessions.start_session(SESSION, "message 1")
            began = time.perf_counter()
            for n in range(1, turns + 1):
                if n > 1:
                    await sessions.send_user_message(SESSION, f"message {n}")
                await wait_for_agent_snapshot(sessions, SESSION, _idle_after(n), timeout=60.0)
                if n % 100 == 0:
                    print(f"{n} turns in {time.perf_counter() - began:.0f} s", flush=True)
            base = f"http://{stack.server_address}"
            async with httpx.AsyncClient(base_url=base, timeout=60.0) as c:
                page = await c.get("/ui/session", params={"id": SESSION})
                messages = page.text.count('class="msg ')
                events = 0
                token: str | None = ""
                while token is not None:
                    r = await c.get(
                        f"/v1/flows/{SESSION}/history",
                        params={"page_size": 1000, "page_token": token},
                    )
                    r.raise_for_status()
                    body = r.json()
                    events += len(body.get("events", []))
                    token = body.get("next_page_token")
                session = await _times(c, f"/ui/session?id={SESSION}", rounds)
                flow_page = await _times(c, f"/ui/flow?id={SESSION}", rounds)
                approvals = await _times(c, "/ui/approvals", rounds)
    ms = 1000.0
    print(
        f"web_pages messages={messages} history_events={events}"
        f" session_best_ms={min(session) * ms:.0f}"
        f" session_median_ms={statistics.median(session) * ms:.0f}"
        f" flow_best_ms={min(flow_page) * ms:.0f}"
        f" flow_median_ms={statistics.median(flow_page) * ms:.0f}"
        f" approvals_best_ms={min(approvals) * ms:.0f}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    a = parser.parse_args()
    asyncio.run(main(a.turns, a.rounds))
