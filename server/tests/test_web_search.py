"""Dex Web's Flow search in a real browser: Debian's chromium driven by Playwright.

One server for the module and a wire-protocol Worker whose Step writes indexed
Attributes, so the search reads rows the engine indexed from a Step result.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator

import httpx
import msgspec
import pytest
import pytest_asyncio
from dex._protocol import (
    DecisionSpec,
    FlowSpec,
    StartFlowRequest,
    StateDecl,
    StepSpec,
    Task,
    TaskResult,
    encoder,
)
from dex_agents.testing import wait_until
from dex_server.testing import RunningServer, running_server
from playwright.async_api import Browser, Page, async_playwright, expect

from tests._rawworker import RawWorker, raw
from tests._web_agent import XSS

CHROMIUM = os.environ.get("DEX_WEB_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 20_000
expect.set_options(timeout=WAIT_MS)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]

SPEC = FlowSpec(
    flow_type="Shipment",
    start_step="Tag",
    steps=[StepSpec(step_type="Tag")],
    state=[
        StateDecl(name="region", kind="attribute", index_type="keyword", index_key="Region"),
        StateDecl(name="note", kind="attribute", index_type="keyword", index_key="Note"),
        StateDecl(name="weight", kind="attribute", index_type="int", index_key="Weight"),
    ],
)
SHIPMENTS = {
    "ship-eu-1": {"region": "eu", "note": "fragile", "weight": 3},
    "ship-eu-2": {"region": "eu", "note": "plain", "weight": 12},
    "ship-us-1": {"region": "us", "note": "plain", "weight": 5},
    "ship-xss": {"region": "apac", "note": XSS, "weight": 1},
}


async def tag_step(w: RawWorker, t: Task) -> TaskResult | None:
    assert t.kind == "execute" and t.input is not None
    values = msgspec.json.decode(t.input)
    return TaskResult(
        task_id=t.task_id,
        attribute_writes={name: raw(v) for name, v in values.items()},
        decision=DecisionSpec(kind="graceful_complete", output=raw(None)),
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def server(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[RunningServer]:
    async with running_server(tmp_path_factory.mktemp("websearch")) as srv:
        async with RawWorker(srv.address, [SPEC], tag_step), httpx.AsyncClient() as http:
            for fid, values in SHIPMENTS.items():
                body = StartFlowRequest(
                    flow_type="Shipment", flow_id=fid, spec=SPEC, input=raw(values)
                )
                r = await http.post(f"{srv.url}/v1/flows", content=encoder.encode(body))
                assert r.status_code == 200, r.text

            async def all_completed() -> bool | None:
                r = await http.get(f"{srv.url}/v1/flows", params={"query": "Weight >= 0"})
                flows = r.json()["flows"] if r.status_code == 200 else []
                done = len(flows) == len(SHIPMENTS)
                return True if done and all(f["status"] == "completed" for f in flows) else None

            await wait_until("every Shipment tagged and completed", all_completed)
            yield srv


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


async def _search(page: Page, server: RunningServer, query: str) -> None:
    await page.goto(server.url + "/ui/flows")
    await page.get_by_label("Search").fill(query)
    await page.get_by_role("button", name="Filter").click()


async def _listed(page: Page) -> list[str]:
    return await page.locator("#flows tbody tr td:first-child a").all_inner_texts()


async def test_search_by_an_indexed_attribute_finds_exactly_the_matches(
    server: RunningServer, page: Page
) -> None:
    await _search(page, server, "Region = 'eu'")
    rows = page.locator("#flows tbody tr")
    await expect(rows).to_have_count(2)
    assert sorted(await _listed(page)) == ["ship-eu-1", "ship-eu-2"]
    await expect(page.locator("#flows thead")).to_contain_text("Indexed Attributes")
    cell = rows.filter(has_text="ship-eu-2").locator("td.indexed")
    await expect(cell.locator('[data-key="Weight"]')).to_have_text("Weight = 12")
    await expect(cell.locator('[data-key="Note"]')).to_have_text('Note = "plain"')
    # the search input keeps the query; the status filter narrows it further
    await expect(page.get_by_label("Search")).to_have_value("Region = 'eu'")
    await _search(page, server, "Weight > 4 OR Region = 'apac'")
    await expect(rows).to_have_count(3)
    await page.locator("select[name=status]").select_option("running")
    await page.get_by_role("button", name="Filter").click()
    await expect(page.locator("p.empty")).to_have_text("No Flows match.")
    await page.locator("select[name=status]").select_option("completed")
    await page.get_by_label("ID prefix").fill("ship-eu")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(1)
    assert await _listed(page) == ["ship-eu-2"]


async def test_a_bad_query_shows_the_error_at_its_token(server: RunningServer, page: Page) -> None:
    query = "Region = eu"
    await _search(page, server, query)
    await expect(page.locator("div.error")).to_contain_text("takes a quoted string")
    await expect(page.locator("div.error")).to_contain_text("at position 9 near 'eu'")
    shown = await page.locator("#query-error").inner_text()
    line, caret = shown.split("\n")[:2]
    assert line == query and caret == " " * 9 + "^"
    await expect(page.locator("#flows tbody tr")).to_have_count(0)


async def test_an_indexed_value_with_markup_is_shown_as_text(
    server: RunningServer, page: Page
) -> None:
    await _search(page, server, "Region = 'apac'")
    cell = page.locator("#flows td.indexed [data-key='Note']")
    await expect(cell).to_have_text("Note = " + msgspec.json.encode(XSS).decode())
    assert await page.locator("#flows img, #flows script").count() == 0
    assert await page.title() != "pwned"
    # the same markup typed into the query comes back escaped in the input and the error
    await _search(page, server, XSS)
    await expect(page.locator("div.error")).to_contain_text("Not searched")
    await expect(page.get_by_label("Search")).to_have_value(XSS)
    assert await page.locator("main img, main script").count() == 0
    assert await page.title() != "pwned"
