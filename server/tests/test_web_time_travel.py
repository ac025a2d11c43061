"""Dex Web's time-travel dialog in a real browser (Debian's chromium via Playwright).

One server process, one Worker child process serving the ``Order`` Flow (Prepare →
Charge → Await; Charge is single-attempt and logs each run, so the test counts its
effect), on the store the suite runs on.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from dex_server.web._timetravel import parse_form, parse_time
from playwright.async_api import Browser, Page, async_playwright, expect

from tests._pg import until
from tests._tt_flows import COUNTER
from tests.test_time_travel import Rig, _closed, _finished_order, _rig, _total, _waiting

CHROMIUM = os.environ.get("DEX_WEB_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)

pytestmark = [pytest.mark.timeout(180)]
browser_test = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rig(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Rig]:
    async with _rig(tmp_path_factory.mktemp("web-tt")) as r:
        yield r


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


def _url(rig: Rig) -> str:
    return f"http://{rig.server.address}"


@browser_test
async def test_time_travel_from_the_dialog_keeps_the_committed_charge(rig: Rig, page: Page) -> None:
    fid = "web-tt-begin"
    old = await _finished_order(rig, fid)
    await page.goto(_url(rig) + f"/ui/flow?id={fid}")
    dialog = page.locator("#time-travel-dialog")
    await dialog.locator("summary").click()
    await expect(dialog).to_contain_text("is not run again")
    await expect(dialog.get_by_label("from the beginning")).to_be_checked()
    await dialog.get_by_label("Reason").fill("replay after the fix")
    await dialog.get_by_role("button", name="Time travel").click()
    notice = page.locator("#time-travel-notice")
    await expect(notice).to_contain_text("Time travel made the new run")
    new = await notice.locator("a").first.inner_text()
    assert new != old
    await expect(notice.locator("a").nth(1)).to_have_text(old)
    await _closed(rig, fid, new)
    # by default the committed single-attempt Charge is taken from the record, not rerun
    assert rig.count("charge", fid) == 1
    assert rig.count("prepare", fid, new) == 1
    await page.goto(_url(rig) + f"/ui/flow?id={fid}")
    await expect(page.locator("#flow-status")).to_have_text("completed")
    timeline = page.locator("#timeline")
    await expect(timeline).to_contain_text("TimeTravelFork")
    await expect(timeline).to_contain_text("RecordedOutcomeTaken")
    await expect(timeline).to_contain_text("replay after the fix")
    await expect(timeline.locator("p.prev")).to_contain_text(f"Made from run {old}")
    runs = page.locator("#runs")
    await expect(runs).to_contain_text(f"{new} (latest)")
    await expect(runs).to_contain_text("time travel")
    # the earlier run stays readable by its run ID
    await runs.get_by_role("link", name=old).click()
    await expect(page.locator("#earlier-run")).to_contain_text("earlier run")
    await expect(page.locator("main")).to_contain_text(old)
    await expect(page.locator("#timeline")).to_contain_text("FlowStarted")
    await expect(page.locator("#timeline")).not_to_contain_text("TimeTravelFork")
    await page.locator("#earlier-run").get_by_role("link", name=new).click()
    await expect(page.locator("#runs")).to_be_visible()


@browser_test
async def test_rerun_single_attempt_from_a_step_execution_id(rig: Rig, page: Page) -> None:
    fid = "web-tt-rerun"
    await _finished_order(rig, fid)
    await page.goto(_url(rig) + f"/ui/flow?id={fid}")
    dialog = page.locator("#time-travel-dialog")
    await dialog.locator("summary").click()
    await dialog.get_by_label("at a Step execution ID").check()
    await dialog.get_by_label("Step execution ID", exact=True).fill("Charge-1")
    await dialog.get_by_label("Rerun single-attempt Steps").check()
    await dialog.get_by_role("button", name="Time travel").click()
    notice = page.locator("#time-travel-notice")
    await expect(notice).to_contain_text("Time travel made the new run")
    new = await notice.locator("a").first.inner_text()
    await _closed(rig, fid, new)
    assert rig.count("charge", fid) == 2  # asked for: Charge ran again
    assert rig.count("prepare", fid) == 1  # before the fork point: kept, not rerun


@browser_test
async def test_bad_input_says_why_and_changes_nothing(rig: Rig, page: Page) -> None:
    fid = "web-tt-bad"
    old = await _finished_order(rig, fid)
    await page.goto(_url(rig) + f"/ui/flow?id={fid}")
    dialog = page.locator("#time-travel-dialog")
    await dialog.locator("summary").click()
    await dialog.get_by_label("at the latest execution of a Step type").check()
    await dialog.get_by_role("button", name="Time travel").click()
    await expect(page.get_by_role("status")).to_contain_text("needs step_type")
    await page.locator("#time-travel-dialog summary").click()
    dialog = page.locator("#time-travel-dialog")
    await dialog.get_by_label("at the latest execution of a Step type").check()
    await dialog.get_by_label("Step type", exact=True).fill("Nope")
    await dialog.get_by_role("button", name="Time travel").click()
    await expect(page.get_by_role("status")).to_contain_text("No time travel")
    await expect(page.get_by_role("status")).to_contain_text("Nope")
    info = await rig.client.describe_flow(fid)
    assert info.run_id == old
    assert rig.count("charge", fid) == 1


@browser_test
async def test_a_continued_run_links_to_the_run_before(rig: Rig, page: Page) -> None:
    fid = "web-tt-continued"
    old = await rig.client.start_flow(COUNTER, fid)
    await rig.client.invoke_rpc(COUNTER.tick, fid, 3)
    await _total(rig, fid, 3)
    await _waiting(rig, fid, "Tick-2")
    await rig.client.trigger_continue_as_new(fid)

    async def moved() -> bool:
        return (await rig.client.describe_flow(fid)).run_id != old

    await until(moved, 30, "the new run")
    await page.goto(_url(rig) + f"/ui/flow?id={fid}")
    runs = page.locator("#runs")
    await expect(runs).to_contain_text("continue-as-new")
    await expect(runs).to_contain_text("continued_as_new")
    await expect(page.locator("#timeline p.prev")).to_contain_text(f"Made from run {old}")
    await runs.get_by_role("link", name=old).click()
    await expect(page.locator("#flow-status")).to_have_text("continued_as_new")
    await expect(page.locator("#timeline")).to_contain_text("FlowStarted")
    await rig.client.stop_flow(fid)


@browser_test
async def test_a_time_travel_post_without_the_csrf_token_is_refused(rig: Rig, page: Page) -> None:
    fid = "web-tt-csrf"
    old = await _finished_order(rig, fid)
    await page.goto(_url(rig) + f"/ui/flow?id={fid}")  # a browser session, but no form token
    r = await page.request.post(
        _url(rig) + "/ui/flow/time-travel", form={"id": fid, "type": "beginning"}
    )
    assert r.status == 403
    assert "CSRF" in await r.text()
    assert (await rig.client.describe_flow(fid)).run_id == old


def test_the_form_parses_into_a_request() -> None:
    from dex_server.service._common import ServiceError

    req = parse_form({"type": "beginning", "reason": " why ", "skip_writes_reapply": "on"})
    assert (req.type, req.reason, req.skip_writes_reapply) == ("beginning", "why", True)
    assert req.rerun_single_attempt is False
    req = parse_form(
        {"type": "step_type", "step_type": "Charge", "step_method": "execute", "reason": ""}
    )
    assert (req.step_type, req.step_method, req.reason) == ("Charge", "execute", None)
    req = parse_form({"type": "step_execution_id", "step_execution_id": "Await-1"})
    assert (req.step_execution_id, req.step_method) == ("Await-1", None)
    req = parse_form({"type": "history_event_time", "event_time": "1970-01-01 00:01:00 UTC"})
    assert req.history_event_time == 60.0
    assert parse_time("1970-01-01T01:00:00+01:00") == 0.0
    assert parse_time("1970-01-01T00:00:05Z") == 5.0
    assert parse_time("12.5") == 12.5
    for form, words in [
        ({"type": "reset"}, "unknown fork point"),
        ({}, "unknown fork point"),
        ({"type": "step_type"}, "needs step_type"),
        ({"type": "step_execution_id", "step_execution_id": " "}, "needs step_execution_id"),
        ({"type": "history_event_time"}, "needs event_time"),
        ({"type": "history_event_time", "event_time": "soon"}, "not a time"),
        ({"type": "beginning", "step_type": "Charge"}, "step_type does not apply"),
        ({"type": "step_type", "step_type": "A", "step_method": "run"}, "unknown step method"),
        ({"type": "beginning", "reason": "x" * 1001}, "MAX_REASON_CHARS"),
    ]:
        with pytest.raises(ServiceError) as info:
            parse_form(form)
        assert info.value.code == "BAD_REQUEST"
        assert words in info.value.message, (form, info.value.message)
