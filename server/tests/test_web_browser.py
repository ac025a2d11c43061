"""Dex Web in a real browser: Debian's chromium driven by Playwright.

One ``dexcli dev`` server, one Worker child serving a scripted agent session (no network,
no API key) and one browser for the module; a second server with a token for the login
tests. Playwright's assertions wait (with explicit timeouts) instead of sleeping.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import msgspec
import pytest
import pytest_asyncio
from dex._protocol import FlowSpec, InitialAttribute, StartFlowRequest, StateDecl, encoder
from dex_agents import AgentSessionClient, AgentSessionFlow, AgentSnapshot, AgentStatus
from dex_agents.testing import (
    AgentTestStack,
    InvocationLog,
    WorkerHandle,
    tool_call_kind,
    wait_until,
)
from dex_server.testing import running_server
from playwright.async_api import Browser, Page, async_playwright, expect

from tests._web_agent import STATE_DIR_ENV, XSS, build_flow

CHROMIUM = os.environ.get("DEX_WEB_CHROMIUM", "/usr/bin/chromium")
SERVER_DIR = Path(__file__).resolve().parents[1]
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]


class Desk:
    def __init__(self, stack: AgentTestStack, flow: AgentSessionFlow, state_dir: Path) -> None:
        self.stack = stack
        self.flow = flow
        self.sessions: AgentSessionClient = stack.sessions(self.flow)
        self.log = InvocationLog(state_dir / "calls.log")
        self.url = f"http://{stack.server_address}"
        self.worker: WorkerHandle | None = None


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desk(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Desk]:
    tmp = tmp_path_factory.mktemp("web")
    state_dir = tmp / "state"
    state_dir.mkdir()
    flow = build_flow(state_dir)
    async with AgentTestStack(
        tmp,
        [flow],
        "tests._web_agent",
        worker_cwd=SERVER_DIR,
        worker_env={STATE_DIR_ENV: str(state_dir)},
    ) as stack:
        d = Desk(stack, flow, state_dir)
        d.worker = await stack.start_worker()
        yield d


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        b = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield b
        await b.close()


@pytest_asyncio.fixture(loop_scope="module")
async def page(browser: Browser) -> AsyncIterator[Page]:
    context = await browser.new_context()
    context.set_default_timeout(WAIT_MS)
    p = await context.new_page()
    yield p
    await context.close()


def _idle(turns: int) -> Callable[[AgentSnapshot], AgentSnapshot | None]:
    def probe(s: AgentSnapshot) -> AgentSnapshot | None:
        st = s.state
        ok = (
            st is not None
            and st.turn_count >= turns
            and st.status is AgentStatus.WAITING_FOR_USER_MESSAGE
            and s.queued_message_count == 0
        )
        return s if ok else None

    return probe


async def _wait_idle(desk: Desk, session_id: str, turns: int) -> AgentSnapshot:
    from dex_agents.testing import wait_for_agent_snapshot

    return await wait_for_agent_snapshot(
        desk.sessions,
        session_id,
        _idle(turns),
        description=f"{session_id} idle",
    )


async def _wait_approval(desk: Desk, session_id: str) -> None:
    from dex_agents.testing import wait_for_agent_snapshot

    await wait_for_agent_snapshot(
        desk.sessions,
        session_id,
        lambda s: bool(s.pending_interrupts),
        description=f"an approval in {session_id}",
    )


async def test_approve_from_the_inbox_runs_the_write_once(desk: Desk, page: Page) -> None:
    sid = "web-approve"
    await desk.sessions.start_session(sid, "please refund order 7")
    await _wait_approval(desk, sid)
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid)
    await expect(card).to_contain_text("issue_refund")
    await expect(card).to_contain_text("non_idempotent_write")
    await expect(card.locator("pre")).to_contain_text('"amount": 30')
    await card.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("Approved.")
    await expect(page.locator("section.approval", has_text=sid)).to_have_count(0)
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("refunded 30 on order 7" in m.text for m in snapshot.messages)
    keys = desk.log.keys(tool_call_kind("issue_refund"))
    mine = [k for k in keys if k.startswith(sid + "/")]
    assert len(mine) == 1 and mine[0].startswith(f"{sid}/turn-1/")
    # the conversation view shows the approved call and the model's answer
    await page.goto(desk.url + f"/ui/session?id={sid}")
    await expect(page.locator("#conversation")).to_contain_text("refunded 30 on order 7")


async def test_reject_with_a_reason_reaches_the_model(desk: Desk, page: Page) -> None:
    sid = "web-reject"
    await desk.sessions.start_session(sid, "refund order 7 now")
    await _wait_approval(desk, sid)
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid)
    await card.get_by_label("Reason").fill("amount exceeds the refund limit")
    await card.get_by_role("button", name="Reject").click()
    await expect(page.get_by_role("status")).to_have_text(
        "Rejected with reason: amount exceeds the refund limit."
    )
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("amount exceeds the refund limit" in m.text for m in snapshot.messages)
    keys = desk.log.keys(tool_call_kind("issue_refund"))
    assert not [k for k in keys if k.startswith(sid + "/")]
    await page.goto(desk.url + f"/ui/session?id={sid}")
    await expect(page.locator("#conversation")).to_contain_text("amount exceeds the refund limit")


async def test_send_a_message_from_the_conversation_view(desk: Desk, page: Page) -> None:
    sid = "web-send"
    await desk.sessions.start_session(sid, "hello")
    await _wait_idle(desk, sid, 1)
    await page.goto(desk.url + f"/ui/session?id={sid}")
    await expect(page.locator("#conversation")).to_contain_text("echo: hello")
    await page.get_by_label("Message").fill("second question")
    await page.get_by_role("button", name="Send").click()
    await expect(page.get_by_role("status")).to_have_text("Message queued for the next turn.")
    # the action answered with a redirect: the address is the session page's again
    assert page.url.startswith(desk.url + f"/ui/session?id={sid}&notice=")
    await _wait_idle(desk, sid, 2)
    await page.reload()
    await expect(page.locator("#conversation")).to_contain_text("echo: second question")
    # reloading read the page again; it did not send the message a second time
    snapshot = await desk.sessions.get_agent_snapshot(sid)
    assert snapshot.state is not None and snapshot.state.turn_count == 2
    assert snapshot.queued_message_count == 0
    assert [m.text for m in snapshot.messages].count("second question") == 1


async def test_tool_output_with_markup_is_shown_as_text(desk: Desk, page: Page) -> None:
    sid = "web-xss"
    await desk.sessions.start_session(sid, "show the html")
    await _wait_idle(desk, sid, 1)
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    # the conversation shows the output verbatim; the state panel inside JSON strings
    for url, shown in ((f"/ui/session?id={sid}", XSS), (f"/ui/flow?id={sid}", "<script>document")):
        await page.goto(desk.url + url)
        await expect(page.locator("main")).to_contain_text(shown)
        assert await page.locator("main img").count() == 0
        assert await page.locator("main script").count() == 0
        assert "pwned" not in await page.title()
    assert dialogs == []


async def test_flow_details_show_state_and_history(desk: Desk, page: Page) -> None:
    sid = "web-details"
    await desk.sessions.start_session(sid, "hi there")
    await _wait_idle(desk, sid, 1)
    await page.goto(desk.url + "/ui/flows?prefix=web-det")
    await expect(page.locator("#flows tbody tr")).to_have_count(1)
    await page.get_by_role("link", name=sid).click()
    await expect(page.locator("#flow-status")).to_have_text("running")
    state_row = page.locator("#attributes tr", has_text="AgentState")
    await expect(state_row.locator("pre")).to_contain_text('"status": "waiting_for_user_message"')
    first = page.locator("#timeline li").first
    await expect(first.locator("summary")).to_contain_text("FlowStarted flowType=WebDesk")
    await first.locator("summary").click()
    await expect(first.locator("pre")).to_be_visible()
    raw = await first.locator("pre").inner_text()
    assert isinstance(json.loads(raw), dict)


async def test_stop_a_flow_from_the_dialog(desk: Desk, page: Page) -> None:
    sid = "web-stop"
    await desk.sessions.start_session(sid, "hello")
    await _wait_idle(desk, sid, 1)
    await page.goto(desk.url + f"/ui/flow?id={sid}")
    stop = page.locator("#stop-dialog")
    await stop.locator("summary").click()
    await stop.get_by_label("fail").check()
    await stop.get_by_label("Reason").fill("closed by support")
    await page.get_by_role("button", name="Stop the Flow").click()
    await expect(page.get_by_role("status")).to_have_text("Flow stopped (fail).")
    await expect(page.locator("#flow-status")).to_have_text("failed")
    await expect(page.locator("main")).to_contain_text("closed by support")
    r = await page.request.get(desk.url + f"/v1/flows/{sid}")
    assert (await r.json())["status"] == "failed"


async def test_an_action_without_a_worker_says_so(desk: Desk, page: Page) -> None:
    sid = "web-noworker"
    await desk.sessions.start_session(sid, "refund please")
    await _wait_approval(desk, sid)
    assert desk.worker is not None
    desk.worker.kill()
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid)
    await expect(card).to_contain_text("issue_refund")

    async def gone() -> bool:
        await page.goto(desk.url + "/ui/approvals")
        await (
            page.locator("section.approval", has_text=sid)
            .get_by_role("button", name="Approve")
            .click()
        )
        return "No Worker serves" in (await page.get_by_role("status").inner_text())

    await wait_until("the server to notice the Worker is gone", gone, 20.0)
    await expect(page.get_by_role("status")).to_contain_text("nothing changed")
    # still pending: the page keeps showing it from committed state
    await expect(page.locator("section.approval", has_text=sid)).to_have_count(1)
    desk.worker = await desk.stack.start_worker()


async def test_token_login_and_csrf_refusal(tmp_path: Path, page: Page) -> None:
    async with running_server(tmp_path / "srv", token="s3cret-token") as server:
        base = server.url
        await page.goto(base + "/")
        await expect(page).to_have_url(base + "/ui/login")
        await expect(page.locator("main")).not_to_contain_text("Flow type")
        await page.get_by_label("Server token").fill("wrong")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator("main")).to_contain_text("not the server's token")
        await page.get_by_label("Server token").fill("s3cret-token")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page).to_have_url(base + "/ui/flows")
        await expect(page.locator("#flows")).to_be_visible()
        cookies = await page.context.cookies()
        (cookie,) = [c for c in cookies if c["name"] == "dex_web_session"]
        assert cookie["httpOnly"] is True
        assert cookie["sameSite"] == "Strict"
        assert "s3cret" not in cookie["value"]
        # a state-changing request without the form's CSRF token is refused
        r = await page.request.post(base + "/ui/flow/stop", form={"id": "x", "type": "cancel"})
        assert r.status == 403
        assert "CSRF" in await r.text()
        # and so is one from another origin, even with a token
        r = await page.request.post(
            base + "/ui/flow/stop",
            form={"id": "x", "type": "cancel", "csrf": "whatever"},
            headers={"Origin": "http://evil.example"},
        )
        assert r.status == 403
        assert "another" in await r.text() or "origin" in await r.text()
        # the API still wants the bearer token
        r = await page.request.get(base + "/v1/flows")
        assert r.status == 401


async def test_step_graph_timers_and_cancel_the_turn(desk: Desk, page: Page) -> None:
    sid = "web-graph"
    await desk.sessions.start_session(sid, "please make two refunds")
    await _wait_approval(desk, sid)
    await page.goto(desk.url + f"/ui/flow?id={sid}")
    graph = page.locator("#graph-svg")
    # both approvals wait in parallel: one RunModel execution fanned out to two
    waiting = graph.locator('g.node.active[data-step="AwaitToolApproval"]')
    await expect(waiting).to_have_count(1)
    await expect(waiting.locator("rect.phase.wait-for.on")).to_have_count(1)
    await expect(waiting.locator("text.badge")).to_have_text("active ×2")
    fan = graph.locator('path.edge[data-from="RunModel"][data-to="AwaitToolApproval"]')
    await expect(fan).to_have_count(1)
    await expect(graph.locator("text.edge-label")).to_contain_text(["×2"])
    await expect(graph.locator('g.node.start[data-step="StartAgentSession"]')).to_have_count(1)
    # the approvals' deadline Timers, with their fire times
    timers = page.locator("#timers tr", has_text="AwaitToolApproval")
    await expect(timers).to_have_count(2)
    await expect(timers.first).to_contain_text("UTC")
    await expect(timers.first.locator(".countdown")).to_contain_text("min")
    # the inbox counts the same deadline down
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid).first
    await expect(card.locator(".countdown")).to_contain_text("left")
    # cancel the turn from the conversation view: the approvals go, nothing ran
    await page.goto(desk.url + f"/ui/session?id={sid}")
    await page.get_by_role("button", name="Cancel the turn").click()
    await expect(page.get_by_role("status")).to_have_text("The turn is being cancelled.")
    snapshot = await _wait_idle(desk, sid, 1)
    assert not snapshot.pending_interrupts
    assert not [k for k in desk.log.keys(tool_call_kind("issue_refund")) if k.startswith(sid)]
    await page.reload()
    calls = page.locator("#all-tool-calls tr[data-tool-call]")
    await expect(calls).to_have_count(2)
    await expect(calls.first).to_contain_text("cancelled")
    # one more turn, then idle: AwaitUserMessage waits again; the message RPC started that
    # turn itself (RunModel ran without an AwaitUserMessage execute), so no move of this run
    # leads from AwaitUserMessage and the graph marks no next Step for it
    await page.get_by_label("Message").fill("hello again")
    await page.get_by_role("button", name="Send").click()
    await _wait_idle(desk, sid, 2)
    await page.goto(desk.url + f"/ui/flow?id={sid}")
    graph = page.locator("#graph-svg")
    await expect(graph.locator('g.node.active[data-step="AwaitUserMessage"]')).to_have_count(1)
    await expect(graph.locator('g.node[data-step="RunModel"]:not(.idle)')).to_have_count(1)
    await expect(page.locator("#timers tr", has_text="AwaitToolApproval")).to_have_count(0)


async def test_steer_from_the_conversation_view(desk: Desk, page: Page) -> None:
    sid = "web-steer"
    await desk.sessions.start_session(sid, "refund order 7")
    await _wait_approval(desk, sid)
    await page.goto(desk.url + f"/ui/session?id={sid}")
    await page.get_by_label("Steer with").fill("never mind, just say hi")
    await page.get_by_role("button", name="Steer").click()
    await expect(page.get_by_role("status")).to_have_text(
        "Steered: a new turn starts with the text."
    )
    snapshot = await _wait_idle(desk, sid, 2)
    assert any("echo: never mind, just say hi" in m.text for m in snapshot.messages)
    assert not [k for k in desk.log.keys(tool_call_kind("issue_refund")) if k.startswith(sid)]
    await page.reload()
    await expect(page.locator("#conversation")).to_contain_text("echo: never mind, just say hi")
    # usage per turn and in total; the steered turn's call was cancelled, never run
    usage = page.locator("#turn-usage")
    await expect(usage.locator("tr[data-turn]")).to_have_count(2)
    await expect(usage.locator('tr[data-turn="turn-2"]')).to_contain_text("1 requests")
    await expect(usage.locator("tr.total")).to_contain_text("2 requests")
    await expect(page.locator("#usage-total")).to_contain_text("2 requests")
    call = page.locator("#all-tool-calls tr[data-tool-call]")
    await expect(call).to_have_count(1)
    await expect(call).to_contain_text("cancelled")
    await expect(call).to_contain_text(f"{sid}/turn-1/")


async def test_tool_call_timing_in_the_conversation(desk: Desk, page: Page) -> None:
    sid = "web-timing"
    await desk.sessions.start_session(sid, "show the html")
    await _wait_idle(desk, sid, 1)
    await page.goto(desk.url + f"/ui/session?id={sid}")
    call = page.locator("#all-tool-calls tr[data-tool-call]")
    await expect(call).to_have_count(1)
    await expect(call).to_contain_text("render_html")
    await expect(call).to_contain_text("succeeded")
    await expect(call).to_contain_text("read")
    await expect(call.locator("td.timing time")).to_have_count(2)
    await expect(call.locator("td.timing .duration")).to_contain_text("s")


async def test_a_large_value_loads_on_demand_and_stays_text(desk: Desk, page: Page) -> None:
    big = XSS + " padding" * 1000
    spec = FlowSpec(flow_type="WebBigValue", state=[StateDecl(name="Blob", kind="attribute")])
    req = StartFlowRequest(flow_type="WebBigValue", flow_id="web-big", spec=spec)
    req.initial_attributes = [
        InitialAttribute(name="Blob", value=msgspec.Raw(json.dumps({"html": big}).encode()))
    ]
    r = await page.request.post(
        desk.url + "/v1/flows",
        data=encoder.encode(req),
        headers={"content-type": "application/json"},
    )
    assert r.status == 200, await r.text()
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    await page.goto(desk.url + "/ui/flow?id=web-big")
    row = page.locator('#attributes tr[data-name="Blob"]')
    await expect(row.locator("pre.truncated")).to_have_count(1)
    shown = await row.locator("pre").inner_text()
    assert len(shown) < len(big)
    await row.get_by_role("link", name="Load the whole value").click()
    await expect(page.locator("main pre")).to_contain_text("padding padding")
    text = await page.locator("main pre").inner_text()
    assert json.loads(text) == {"html": big}
    assert await page.locator("main img").count() == 0
    assert await page.locator("main script").count() == 0
    await page.goto(desk.url + "/ui/flow?id=web-big")
    first = page.locator("#timeline li").first
    await first.locator("summary").click()
    # the FlowStarted event keeps the value apart, as a blob: it too loads on demand
    await first.get_by_role("link", name="Load the value stored apart").click()
    await expect(page.locator("h1")).to_contain_text("FlowStarted")
    assert json.loads(await page.locator("main pre").inner_text()) == {"html": big}
    assert await page.locator("main img").count() == 0
    assert "pwned" not in await page.title()
    assert dialogs == []


async def test_flow_list_time_filter(desk: Desk, page: Page) -> None:
    sid = "web-when"
    await desk.sessions.start_session(sid, "hello")
    await _wait_idle(desk, sid, 1)
    await page.goto(desk.url + "/ui/flows?prefix=web-when")
    await expect(page.locator("#flows tbody tr")).to_have_count(1)
    # started after a time in the future: nothing
    await page.get_by_label("Started after (UTC)").fill("2999-01-01T00:00:00")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("#flows tbody tr")).to_have_count(0)
    await expect(page.locator("main")).to_contain_text("No Flows match.")
    # started between 2000 and 2999: the session
    await page.get_by_label("Started after (UTC)").fill("2000-01-01T00:00:00")
    await page.get_by_label("Started before (UTC)").fill("2999-01-01T00:00:00")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("#flows tbody tr")).to_have_count(1)
    await expect(page.locator("#flows")).to_contain_text(sid)
    # started before 2000: nothing
    await page.get_by_label("Started after (UTC)").fill("")
    await page.get_by_label("Started before (UTC)").fill("2000-01-01T00:00:00")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("#flows tbody tr")).to_have_count(0)
    # a time that is no time, and an empty range, are refused before any query
    r = await page.goto(desk.url + "/ui/flows?started_after=yesterday")
    assert r is not None and r.status == 400
    await expect(page.get_by_role("status")).to_contain_text("'yesterday' is not a date")
    r = await page.goto(
        desk.url + "/ui/flows?started_after=2030-01-01T00:00&started_before=2020-01-01T00:00"
    )
    assert r is not None and r.status == 400
    await expect(page.get_by_role("status")).to_contain_text("must be earlier")
    await expect(page.locator("#flows tbody tr")).to_have_count(0)


async def test_a_steered_turn_leaves_a_note_shown_as_such(desk: Desk, page: Page) -> None:
    from dex_agents import ToolCallStatus
    from dex_agents.testing import wait_for_agent_snapshot

    sid = "web-note"
    await desk.sessions.start_session(sid, "please make two refunds")
    await wait_for_agent_snapshot(
        desk.sessions,
        sid,
        lambda s: len(s.pending_interrupts) == 2,
        description="two approvals",
    )
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid).first
    await card.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("Approved.")
    await wait_for_agent_snapshot(
        desk.sessions,
        sid,
        lambda s: any(c.status is ToolCallStatus.SUCCEEDED for c in s.tool_calls),
        description="the approved refund to run",
    )
    await page.goto(desk.url + f"/ui/session?id={sid}")
    # the call that ran shows its timing while the turn is still active
    ran = page.locator("#tool-calls tr", has_text="succeeded")
    await expect(ran.locator("td.timing time")).to_have_count(2)
    await page.get_by_label("Steer with").fill("stop there, thanks")
    await page.get_by_role("button", name="Steer").click()
    await expect(page.get_by_role("status")).to_contain_text("Steered")
    await _wait_idle(desk, sid, 2)
    await page.reload()
    note = page.locator("#conversation .msg-note")
    await expect(note).to_have_count(1)
    await expect(note.locator(".note-label")).to_have_text("steer note")
    await expect(note).to_contain_text("issue_refund")
    await expect(page.locator("#conversation")).to_contain_text("echo: stop there, thanks")
    statuses = page.locator("#all-tool-calls tr[data-tool-call]")
    await expect(statuses).to_have_count(2)
    await expect(page.locator("#all-tool-calls")).to_contain_text("succeeded")
    await expect(page.locator("#all-tool-calls")).to_contain_text("cancelled")
    assert len([k for k in desk.log.keys(tool_call_kind("issue_refund")) if k.startswith(sid)]) == 1


async def test_approve_with_edited_arguments_from_the_inbox(desk: Desk, page: Page) -> None:
    sid = "web-edit"
    await desk.sessions.start_session(sid, "please refund order 7")
    await _wait_approval(desk, sid)
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.approval", has_text=sid)
    box = card.get_by_label("Edit arguments")
    await box.fill("[1, 2]")
    await card.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_contain_text("must be a JSON object")
    card = page.locator("section.approval", has_text=sid)
    await card.get_by_label("Edit arguments").fill('{"order_id": 7, "amount": 11}')
    await card.get_by_label("Approver").fill("dana")
    await card.get_by_role("button", name="Approve").click()
    await expect(page.get_by_role("status")).to_have_text("Approved with edited arguments.")
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("refunded 11 on order 7" in m.text for m in snapshot.messages)


async def test_answer_a_tool_question_from_the_inbox(desk: Desk, page: Page) -> None:
    sid = "web-ask"
    await desk.sessions.start_session(sid, "book a visit please")
    await _wait_approval(desk, sid)
    # the session list counts it as a question, not as an approval
    await page.goto(desk.url + "/ui/sessions")
    row = page.locator("#sessions tr", has_text=sid)
    await expect(row.locator("td").nth(4)).to_have_text("0")
    await expect(row.locator("td").nth(5)).to_have_text("1")
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.question", has_text=sid)
    await expect(card).to_contain_text("Question from book_visit")
    await expect(card.locator(".question-message")).to_have_text("Which day suits the visit?")
    await expect(card.get_by_role("button", name="Approve")).to_have_count(0)
    await card.get_by_role("button", name="Answer").click()
    await expect(page.get_by_role("status")).to_contain_text("'day' is required")
    card = page.locator("section.question", has_text=sid)
    await card.get_by_label("the visit's date").fill("2026-12-10")
    await card.get_by_role("button", name="Answer").click()
    await expect(page.get_by_role("status")).to_have_text("Question answered.")
    await expect(page.locator("section.approval", has_text=sid)).to_have_count(0)
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("visit booked at depot on 2026-12-10" in m.text for m in snapshot.messages)


async def test_decline_a_tool_question_from_the_inbox(desk: Desk, page: Page) -> None:
    sid = "web-decline-ask"
    await desk.sessions.start_session(sid, "book a visit soon")
    await _wait_approval(desk, sid)
    await page.goto(desk.url + "/ui/approvals")
    card = page.locator("section.question", has_text=sid)
    await card.get_by_role("button", name="Decline").click()
    await expect(page.get_by_role("status")).to_have_text("Question declined.")
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("no visit booked at depot: the person declined" in m.text for m in snapshot.messages)
