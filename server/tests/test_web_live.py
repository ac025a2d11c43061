"""Dex Web's live updates, in a real browser against a real server and Worker children.

Debian's chromium driven by Playwright (the browser fixtures of ``test_web_browser``); a
``dexcli dev`` server and Worker child processes serving the scripted session of
``tests._web_live_agent``. The Worker is SIGKILLed at file gates in the middle of the
model call. Plain-HTTP checks of the ``/ui/live`` routes come first.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import pytest_asyncio
from dex_agents import AgentSessionClient, AgentSessionFlow
from dex_agents.testing import (
    AgentTestStack,
    FileGate,
    WorkerHandle,
    wait_for_agent_snapshot,
    wait_until,
)
from dex_server.testing import running_server
from playwright.async_api import Page, expect

from tests._web_live_agent import STATE_DIR_ENV, XSS, build_flow, draft
from tests.test_edge_input import _start
from tests.test_web_browser import browser, page

__all__ = ["browser", "page"]  # fixtures, used by name

SERVER_DIR = Path(__file__).resolve().parents[1]
WAIT_MS = 30_000
expect.set_options(timeout=WAIT_MS)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]


class Live:
    def __init__(self, stack: AgentTestStack, flow: AgentSessionFlow, state_dir: Path) -> None:
        self.stack = stack
        self.sessions: AgentSessionClient = stack.sessions(flow)
        self.gates = state_dir / "gates"
        self.url = f"http://{stack.server_address}"
        self.worker: WorkerHandle | None = None

    def gate(self, name: str) -> FileGate:
        return FileGate(self.gates, name)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def live(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Live]:
    tmp = tmp_path_factory.mktemp("web-live")
    state_dir = tmp / "state"
    state_dir.mkdir()
    flow = build_flow(state_dir)
    async with AgentTestStack(
        tmp,
        [flow],
        "tests._web_live_agent",
        worker_cwd=SERVER_DIR,
        worker_env={STATE_DIR_ENV: str(state_dir)},
    ) as stack:
        lv = Live(stack, flow, state_dir)
        lv.worker = await stack.start_worker()
        yield lv


# ------------------------------------------------------------------ plain HTTP


async def test_the_script_is_served_under_the_page_policy(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "srv") as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        page_r = await http.get("/ui/flows")
        csp = page_r.headers["content-security-policy"]
        assert "script-src 'self';" in csp and "connect-src 'self'" in csp
        assert '<script src="/ui/static/dex-live.js" defer></script>' in page_r.text
        js = await http.get("/ui/static/dex-live.js")
        assert js.status_code == 200
        assert js.headers["content-type"].startswith("text/javascript")
        # values go in as text only
        assert "innerHTML" not in js.text and "textContent" in js.text


async def test_the_version_is_an_etag_answered_304_until_something_commits(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path / "srv") as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        first = await http.get("/ui/live/version")
        assert first.status_code == 200
        tag = first.headers["etag"]
        assert json.loads(first.text)["version"] == tag.strip('"')
        again = await http.get("/ui/live/version", headers={"if-none-match": tag})
        assert again.status_code == 304 and again.content == b""
        # a commit (a Flow started) moves the version on
        r = await http.post("/v1/flows", content=_start("v1"))
        assert r.status_code == 200, r.text
        after = await http.get("/ui/live/version", headers={"if-none-match": tag})
        assert after.status_code == 200 and after.headers["etag"] != tag


async def test_live_feeds_need_the_session_cookie_when_the_server_has_a_token(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path / "srv", token="live-token") as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        for path in ("/ui/live/version", "/ui/live/history?id=x", "/ui/live/stream?id=x"):
            r = await http.get(path)
            assert r.status_code == 303 and r.headers["location"] == "/ui/login", path
        # the bearer token opens /v1, not Dex Web
        r = await http.get("/ui/live/version", headers={"authorization": "Bearer live-token"})
        assert r.status_code == 303


async def test_the_ui_feeds_stream_server_sent_events_with_the_session_cookie(
    tmp_path: Path,
) -> None:
    async with (
        running_server(tmp_path / "srv") as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30.0) as http,
    ):
        assert (await http.post("/v1/flows", content=_start("ui-feed"))).status_code == 200
        w = await http.post(
            "/v1/streams/Talker/out/ui-feed", json={"source": "test", "value": {"n": 1}}
        )
        assert w.status_code == 200, w.text
        stop = await http.post("/v1/flows/ui-feed/stop", json={"type": "cancel"})
        assert stop.status_code == 200, stop.text
        # a closed Flow: the feeds send what there is, then the end (no cookie yet: one is set)
        r = await http.get("/ui/live/history", params={"id": "ui-feed"})
        assert r.headers["content-type"].startswith("text/event-stream")
        assert "dex_web_session=" in r.headers["set-cookie"]
        history = _events(r.text)
        assert {e["event"] for e in history[:-1]} == {"history"}
        assert history[-1]["event"] == "end"
        assert json.loads(history[-1]["data"])["status"] == "canceled"
        r = await http.get(
            "/ui/live/stream", params={"id": "ui-feed", "stream": "out", "after": "0"}
        )
        stream = _events(r.text)
        assert [e["event"] for e in stream] == ["message", "end"]
        assert json.loads(stream[0]["data"])["value"] == {"n": 1}


def _events(text: str) -> list[dict[str, str]]:
    """The events of a whole text/event-stream body (comments and retry left out)."""
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            out.append(fields)
    return out


# ------------------------------------------------------------------ in the browser


async def _turn_text(page: Page) -> str:
    return await page.locator("#live-text").inner_text()


async def test_live_text_keeps_only_the_highest_attempt_across_a_worker_kill(
    live: Live, page: Page
) -> None:
    sid = "live-retry"
    await live.sessions.start_session(sid)
    await page.goto(live.url + f"/ui/session?id={sid}")
    await expect(page.locator("#conversation")).to_be_visible()
    await live.sessions.send_user_message(sid, "live retry please")

    # attempt 1 streams half its answer, then fails: its text shows live
    await live.gate("live-1").wait_until_reached()
    live.gate("live-1").release()
    await live.gate("live-2").wait_until_reached()
    group = page.locator("#live-text .live")
    await expect(group).to_have_count(1)
    await expect(group).to_contain_text("draft 1")
    await expect(group).to_have_attribute("data-attempt", "1")

    # the Worker dies in the middle of attempt 2's model call; a new one takes over
    assert live.worker is not None
    live.worker.kill()
    live.worker = await live.stack.start_worker()
    retried = await wait_until(
        "attempt 2 redelivered or attempt 3 started",
        lambda: (
            "live-2"
            if live.gate("live-2").reached_count() >= 2
            else "live-3"
            if live.gate("live-3").is_reached()
            else None
        ),
        timeout=60.0,
    )
    print(
        f"after the kill: {retried} (attempt 2 {'redelivered' if retried == 'live-2' else 'spent'})"
    )
    if retried == "live-2":
        live.gate("live-2").release()
        await live.gate("live-3").wait_until_reached()
        # attempt 2 replaced attempt 1's text in the same group: only the highest stays
        await expect(group).to_have_count(1)
        await expect(group).to_have_attribute("data-attempt", "2")
        await expect(group).to_contain_text("draft 2")
        await expect(group).not_to_contain_text("draft 1")
        # a page opened now, mid-turn, starts at the turn's start and shows the same
        late = await page.context.new_page()
        await late.goto(live.url + f"/ui/session?id={sid}")
        await expect(late.locator("#live-text .live")).to_have_attribute("data-attempt", "2")
        await expect(late.locator("#live-text .live")).to_contain_text("draft 2")
        await expect(late.locator("#live-text")).not_to_contain_text("draft 1")
        await late.close()

    # attempt 3 answers whole: the stored message replaces the live text
    live.gate("live-3").release()
    final = draft(3).strip()
    await expect(page.locator("#conversation")).to_contain_text(final)
    await expect(page.locator("#live-text .live")).to_have_count(0)
    body = await page.locator("main").inner_text()
    assert "draft 1" not in body and "draft 2" not in body
    snapshot = await live.sessions.get_agent_snapshot(sid)
    assert [m.text.strip() for m in snapshot.messages if m.role.value == "assistant"] == [final]


async def test_a_pending_approval_stays_on_the_open_page_while_the_worker_is_down(
    live: Live, page: Page
) -> None:
    sid = "live-approval"
    await live.sessions.start_session(sid, "please refund order 7")
    await wait_for_agent_snapshot(
        live.sessions,
        sid,
        lambda s: bool(s.pending_interrupts),
        description=f"an approval in {sid}",
    )
    await page.goto(live.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid)
    await expect(card).to_contain_text("issue_refund")

    assert live.worker is not None
    live.worker.kill()
    # a change elsewhere refreshes the open page, which still shows the approval
    async with page.expect_response(
        lambda r: "/ui/approvals" in r.url and r.request.resource_type == "fetch",
        timeout=WAIT_MS,
    ) as refreshed:
        await live.sessions.start_session("live-bystander")
    assert (await refreshed.value).status == 200
    await expect(page.locator("section.approval", has_text=sid)).to_have_count(1)
    await expect(page.locator("section.approval", has_text=sid)).to_contain_text(
        "non_idempotent_write"
    )
    # the session's page says the same, with the Worker still down
    await page.goto(live.url + f"/ui/session?id={sid}")
    await expect(page.locator("main")).to_contain_text("1 approval(s) waiting")

    live.worker = await live.stack.start_worker()
    await page.goto(live.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid)
    await card.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("Approved.")
    snapshot = await wait_for_agent_snapshot(
        live.sessions,
        sid,
        lambda s: s if any("refunded 30 on order 7" in m.text for m in s.messages) else None,
        description=f"{sid} answered",
    )
    assert snapshot.pending_interrupts == []


async def test_run_details_and_lists_follow_new_commits(live: Live, page: Page) -> None:
    sid = "live-history"
    await live.sessions.start_session(sid, "hello")
    await wait_for_agent_snapshot(
        live.sessions,
        sid,
        lambda s: s if any("echo: hello" in m.text for m in s.messages) else None,
        description=f"{sid} answered",
    )
    await page.goto(live.url + f"/ui/flow?id={sid}")
    events = page.locator("#timeline li")
    shown = await events.count()
    assert shown > 0
    lists = await page.context.new_page()
    await lists.goto(live.url + "/ui/sessions")
    await expect(lists.locator("#sessions")).to_contain_text(sid)

    await live.sessions.send_user_message(sid, "again")
    # new history events are appended, and the state panel shows the new answer
    await expect(page.locator("#state")).to_contain_text("echo: again")
    assert await events.count() > shown
    ids = [
        int(i.removeprefix("event-")) for i in await events.evaluate_all("l => l.map(e => e.id)")
    ]
    assert ids == sorted(set(ids))
    # a session started elsewhere shows up in the open list
    await live.sessions.start_session("live-newcomer")
    await expect(lists.locator("#sessions")).to_contain_text("live-newcomer")
    await lists.close()


async def test_markup_in_live_text_is_shown_as_text(live: Live, page: Page) -> None:
    sid = "live-markup"
    await live.sessions.start_session(sid)
    await page.goto(live.url + f"/ui/session?id={sid}")
    title = await page.title()
    await live.sessions.send_user_message(sid, "live markup")
    await live.gate("markup-1").wait_until_reached()
    live.gate("markup-1").release()
    await live.gate("markup-2").wait_until_reached()
    group = page.locator("#live-text .live")
    await expect(group).to_contain_text(XSS)
    assert await page.locator("#live-text img, #live-text script").count() == 0
    live.gate("markup-2").release()
    await expect(page.locator("#conversation")).to_contain_text(XSS + XSS)
    assert await page.locator("main img, main script").count() == 0
    assert await page.title() == title
