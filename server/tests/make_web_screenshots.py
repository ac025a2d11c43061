"""Take the screenshots of ``docs/images/`` from the real Dex Web.

Run from ``server/``: ``uv run python -m tests.make_web_screenshots ../docs/images``.
Starts a ``dexcli dev`` server and a Worker child serving the browser tests' scripted
agent session, creates a few sessions (two waiting for approvals) and saves one PNG
per main page, plus the Step graph, the state panel and the turns of a conversation.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from dex_agents.testing import AgentTestStack, wait_for_agent_snapshot
from playwright.async_api import async_playwright

from tests._web_agent import STATE_DIR_ENV, build_flow

SERVER_DIR = Path(__file__).resolve().parents[1]


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dex-web-shots-") as tmp:
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
            await sessions.start_session("support-1042", "show the html")
            await sessions.start_session("support-1043", "hello, where is my parcel?")
            await sessions.start_session("support-1044", "please refund order 7")
            await sessions.start_session("support-1045", "please make two refunds")
            for sid in ("support-1042", "support-1043"):
                await wait_for_agent_snapshot(
                    sessions,
                    sid,
                    lambda s: (
                        s.state is not None
                        and s.state.turn_count >= 1
                        and s.state.active_turn_id is None
                    ),
                )
            for sid in ("support-1044", "support-1045"):
                await wait_for_agent_snapshot(sessions, sid, lambda s: bool(s.pending_interrupts))
            base = f"http://{stack.server_address}"
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(
                    executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"]
                )
                page = await browser.new_page(viewport={"width": 1200, "height": 800})
                shots = {
                    "web-flows.png": "/ui/flows",
                    "web-approvals.png": "/ui/approvals",
                    "web-session.png": "/ui/session?id=support-1042",
                    "web-flow.png": "/ui/flow?id=support-1044",
                }
                for name, path in shots.items():
                    await page.goto(base + path)
                    await page.screenshot(path=str(out / name), full_page=False)
                # the parts of run details and the conversation below the fold
                parts = {
                    "web-graph.png": ("/ui/flow?id=support-1045", "#step-graph"),
                    "web-state.png": ("/ui/flow?id=support-1045", "#state"),
                    "web-turns.png": ("/ui/session?id=support-1042", "#turns"),
                }
                for name, (path, selector) in parts.items():
                    await page.goto(base + path)
                    await page.locator(selector).screenshot(path=str(out / name))
                await browser.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else "../docs/images")))
