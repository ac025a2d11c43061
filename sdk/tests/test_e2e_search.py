"""End to end: indexed Attributes, ``search_flows`` and ``wait_for_attribute_match`` through
a real server and a Worker child (SQLite, or PostgreSQL with ``DEX_TEST_DATABASE``)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import pytest_asyncio
from dex import AttributeMatch, FlowStatus, SearchFlowsPage, WaitForAttributeOptions
from dex.errors import (
    BadRequestError,
    FlowNotActiveOrNotFoundError,
    LimitExceededError,
    RequestTimeoutError,
)

from tests.e2e_flows.harness import Stack, e2e_stack, unique_id
from tests.e2e_flows.search_flows import AMOUNT, LABELS, SEARCH_ORDER, STAGE, STATUS

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    async with e2e_stack(tmp_path_factory.mktemp("e2e-search")) as running:
        yield running


async def place(stack: Stack, flow_id: str, values: dict[str, Any]) -> None:
    """Start one order and wait until its first Step committed the values."""
    await stack.client.start_flow(SEARCH_ORDER, flow_id, values)
    placed = await stack.client.wait_for_attribute_match(
        flow_id, STAGE, AttributeMatch.equal_to("placed"), WaitForAttributeOptions()
    )
    assert placed == "placed"


async def ids(stack: Stack, query: str, page_size: int = 100) -> list[str]:
    page = await stack.client.search_flows(query, page_size)
    return [f.flow_id for f in page.flows]


async def test_a_search_sees_the_commit_that_wrote_the_attribute(stack: Stack) -> None:
    batch = uuid.uuid4().hex
    flow_id = unique_id("seen")
    values = {
        "batch": batch,
        "order_status": "new",
        "note": "Fragile: handle the Blue vase with care",
        "tags": ["gift", "express"],
        "Amount": 42,
        "price": 9.5,
        "vip": True,
        "due": "2030-01-02T03:04:05+00:00",
        "labels/colour": "blue",
    }
    await place(stack, flow_id, values)
    # no polling: the Step's commit wrote the index rows, so the first search sees them
    page = await stack.client.search_flows(f"Batch = '{batch}'", 10)
    assert isinstance(page, SearchFlowsPage)
    (entry,) = page.flows
    assert entry.flow_id == flow_id and entry.flow_type == "SearchOrder"
    assert entry.status is FlowStatus.RUNNING and entry.closed_at is None
    assert dict(entry.indexed_attributes) == {
        "Batch": batch,
        "OrderStatus": "new",
        "Note": values["note"],
        "Tags": ["gift", "express"],
        "Amount": 42,
        "Price": 9.5,
        "Vip": True,
        "Due": "2030-01-02T03:04:05+00:00",
        "Label": "blue",
    }
    # an RPC's commit: the search right after the call returns sees the new value
    await stack.client.invoke_rpc(SEARCH_ORDER.update, flow_id, {"order_status": "paid"})
    assert await ids(stack, f"Batch = '{batch}' AND OrderStatus = 'paid'") == [flow_id]
    assert await ids(stack, f"Batch = '{batch}' AND OrderStatus = 'new'") == []
    # a deleted value leaves the index
    await stack.client.invoke_rpc(SEARCH_ORDER.update, flow_id, {"order_status": None})
    assert await ids(stack, f"Batch = '{batch}' AND OrderStatus IS NULL") == [flow_id]
    # closing shows in the system fields
    await stack.client.invoke_rpc(SEARCH_ORDER.finish, flow_id)
    await stack.client.wait_for_flow(flow_id, timeout=20)
    assert await ids(stack, f"Batch = '{batch}' AND ExecutionStatus = 'Completed'") == [flow_id]
    assert await ids(stack, f"Batch = '{batch}' AND CloseTime IS NOT NULL") == [flow_id]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def orders(stack: Stack) -> tuple[str, dict[str, str]]:
    """Four running orders in one batch: a..d."""
    batch = uuid.uuid4().hex
    rows = {
        "a": dict(
            order_status="new",
            note="red apple pie",
            tags=["x", "y"],
            Amount=5,
            price=1.5,
            vip=True,
            due="2030-01-01T00:00:00Z",
        ),
        "b": dict(
            order_status="paid",
            note="green apple",
            tags=["y"],
            Amount=50,
            price=2.25,
            vip=False,
            due="2030-06-01T12:00:00+02:00",
        ),
        "c": dict(
            order_status="paid-late",
            note="blueberry muffin",
            tags=[],
            Amount=-7,
            price=100.0,
            vip=False,
            due="2031-01-01T00:00:00",
        ),
        "d": dict(order_status="shipped", Amount=500),
    }
    names = {k: unique_id(f"order-{k}") for k in rows}
    await asyncio.gather(*(place(stack, names[k], {"batch": batch, **v}) for k, v in rows.items()))
    return batch, names


CASES = [
    ("OrderStatus = 'paid'", "b"),
    ("OrderStatus != 'paid'", "acd"),
    ("OrderStatus IN ('new', 'shipped')", "ad"),
    ("OrderStatus NOT IN ('new', 'shipped')", "bc"),
    ("OrderStatus STARTS_WITH 'paid'", "bc"),
    ("OrderStatus BETWEEN 'n' AND 'p'", "a"),
    ("OrderStatus > 'paid'", "cd"),
    ("Note = 'APPLE'", "ab"),
    ("Note != 'apple'", "cd"),
    ("Tags = 'y'", "ab"),
    ("Tags IN ('x', 'zz')", "a"),
    ("Tags != 'y'", "cd"),
    ("Amount = 50", "b"),
    ("Amount > 5", "bd"),
    ("Amount >= 5", "abd"),
    ("Amount < 0", "c"),
    ("Amount <= 5", "ac"),
    ("Amount BETWEEN -10 AND 10", "ac"),
    ("Amount NOT BETWEEN -10 AND 10", "bd"),
    ("Amount IN (5, 500)", "ad"),
    ("Price > 2", "bc"),
    ("Price <= 2.25", "ab"),
    ("Vip = true", "a"),
    ("Vip = FALSE", "bc"),
    ("Vip != true", "bc"),
    ("Due < '2030-06-01T10:00:00Z'", "a"),
    ("Due >= '2030-06-01T10:00:00Z'", "bc"),
    ("Due BETWEEN '2030-01-01' AND '2030-12-31'", "ab"),
    ("Note IS NULL", "d"),
    ("NOT (Amount > 5 OR Vip = true)", "c"),
    ("(OrderStatus = 'new' OR OrderStatus = 'paid') AND Price < 2", "a"),
    ("Amount > 0 AND NOT Tags = 'x'", "bd"),
    ("FlowType = 'SearchOrder' AND ExecutionStatus = 'running' AND Amount > 100", "d"),
    ("ActiveStepTypes = 'Hold'", "abcd"),
    ("ActiveStepTypes = 'Place'", ""),
    ("DexParentFlowID IS NULL", "abcd"),
    ("StartTime > '2000-01-01T00:00:00Z'", "abcd"),
]


@pytest.mark.parametrize(("query", "expected"), CASES)
async def test_each_index_type_and_operator(
    stack: Stack, orders: tuple[str, dict[str, str]], query: str, expected: str
) -> None:
    batch, names = orders
    found = await ids(stack, f"Batch = '{batch}' AND ({query})")
    assert sorted(found) == sorted(names[k] for k in expected), query


async def test_order_by_and_pages(stack: Stack, orders: tuple[str, dict[str, str]]) -> None:
    batch, names = orders
    by = {v: k for k, v in names.items()}

    async def order(q: str) -> str:
        return "".join(by[i] for i in await ids(stack, f"Batch = '{batch}' {q}"))

    assert await order("ORDER BY Amount") == "cabd"
    assert await order("ORDER BY Amount DESC") == "dbac"
    assert await order("AND Amount > 0 ORDER BY Amount DESC") == "dba"
    assert await order("ORDER BY Price DESC") == "cbad"  # no value: last
    assert await order("ORDER BY Vip DESC, Amount ASC") == "acbd"
    assert await order("ORDER BY Due") == "abcd"
    assert await order("ORDER BY FlowId") == "".join(sorted("abcd", key=lambda k: names[k]))
    assert await order("ORDER BY StartTime") in (
        "abcd",
        *(
            # the four started concurrently: their start order is not the test's
            "".join(p)
            for p in __import__("itertools").permutations("abcd")
        ),
    )
    seen: list[str] = []
    token = ""
    query = f"Batch = '{batch}' ORDER BY Amount"
    while True:
        page = await stack.client.search_flows(query, 3, token)
        seen += [by[f.flow_id] for f in page.flows]
        token = page.next_page_token
        if not token:
            break
    assert "".join(seen) == "cabd"
    with pytest.raises(BadRequestError, match="page_token"):
        await stack.client.search_flows(f"Batch = '{batch}'", 3, page.next_page_token or "x")


@pytest.mark.parametrize(
    ("query", "position", "token"),
    [
        ("OrderStatus = ", 14, ""),
        ("OrderStatus == 'x'", 13, "="),
        ("Nope = 'x'", 0, "Nope"),
        ("Amount = 'five'", 9, "'five'"),
        ("Amount = 1.5", 9, "1.5"),
        ("Vip > true", 4, ">"),
        ("Note STARTS_WITH 'a'", 5, "STARTS_WITH"),
        ("(Amount = 1", 11, ""),
        ("Amount = 1 ORDER BY Tags", 20, "Tags"),
        ("Amount = 1 ORDER Amount", 17, "Amount"),
        ("Due < 'yesterday'", 6, "'yesterday'"),
        ("OrderStatus = 'x' AND", 21, ""),
        ("OrderStatus = 'x' Amount", 18, "Amount"),
        ("OrderStatus = 'unterminated", 14, "'unterminated"),
        ("Amount # 3", 7, "#"),
    ],
)
async def test_a_bad_query_names_the_token_and_position(
    stack: Stack, orders: tuple[str, dict[str, str]], query: str, position: int, token: str
) -> None:
    with pytest.raises(BadRequestError) as raised:
        await stack.client.search_flows(query, 10)
    where = f"at position {position}" + (f" near {token!r}" if token else " (end of query)")
    assert where in str(raised.value), str(raised.value)


async def test_bad_input_changes_nothing(stack: Stack, orders: tuple[str, dict[str, str]]) -> None:
    batch, _ = orders
    before = await stack.client.search_flows(f"Batch = '{batch}' ORDER BY Amount", 100)
    for bad in (("Amount >", 10), (f"Batch = '{batch}'", 0), (f"Batch = '{batch}'", 1001)):
        with pytest.raises(BadRequestError):
            await stack.client.search_flows(*bad)
    with pytest.raises(LimitExceededError, match="max_query_bytes"):
        await stack.client.search_flows("Amount = 1 OR " * 700 + "Amount = 1", 10)
    after = await stack.client.search_flows(f"Batch = '{batch}' ORDER BY Amount", 100)
    assert after == before


async def test_wait_for_attribute_match(stack: Stack) -> None:
    flow_id = unique_id("match")
    await place(stack, flow_id, {"batch": "m", "Amount": 1, "labels/size": "s"})

    async def bump_later() -> None:
        await asyncio.sleep(0.3)  # the wait below must already be waiting
        await stack.client.invoke_rpc(SEARCH_ORDER.update, flow_id, {"Amount": 10})
        await stack.client.invoke_rpc(SEARCH_ORDER.update, flow_id, {"labels/size": "xl"})

    bump = asyncio.create_task(bump_later())
    got = await stack.client.wait_for_attribute_match(
        flow_id, AMOUNT, AttributeMatch.greater_than_or_equal(10)
    )
    assert got == 10
    got_label = await stack.client.wait_for_attribute_match(
        flow_id, LABELS, "size", match=AttributeMatch.equal_to("xl")
    )
    assert got_label == "xl"
    await bump
    assert (
        await stack.client.wait_for_attribute_match(
            flow_id,
            STATUS,
            AttributeMatch[str](),  # matches null: never set
        )
        is None
    )
    short = WaitForAttributeOptions(
        request_timeout=timedelta(seconds=0.5), internal_handler_timeout=timedelta(seconds=0.2)
    )
    with pytest.raises(RequestTimeoutError):
        await stack.client.wait_for_attribute_match(
            flow_id, AMOUNT, AttributeMatch.less_than(0), short
        )
    with pytest.raises(BadRequestError, match="numbers only"):
        await stack.client.wait_for_attribute_match(
            flow_id, STATUS, AttributeMatch.greater_than("a")
        )
    with pytest.raises(TypeError, match="AttributeMatch"):
        await stack.client.wait_for_attribute_match(flow_id, AMOUNT, 3)
    await stack.client.invoke_rpc(SEARCH_ORDER.finish, flow_id)
    await stack.client.wait_for_flow(flow_id, timeout=20)
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.wait_for_attribute_match(
            flow_id, AMOUNT, AttributeMatch.greater_than(100)
        )
    with pytest.raises(FlowNotActiveOrNotFoundError):
        await stack.client.wait_for_attribute_match(
            unique_id("none"), AMOUNT, AttributeMatch.equal_to(1)
        )


def _dexcli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dex_server.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "COLUMNS": "300"},
    )


async def test_dexcli_flow_list_query(stack: Stack, orders: tuple[str, dict[str, str]]) -> None:
    batch, names = orders
    base = ("--server", stack.server.address, "-o", "json", "flow", "list")
    query = f"Batch = '{batch}' ORDER BY Amount DESC"
    done = await asyncio.to_thread(_dexcli, *base, "--query", query)
    assert done.returncode == 0, done.stderr
    flows = json.loads(done.stdout)["flows"]
    assert [f["flowId"] for f in flows] == [names[k] for k in "dbac"]
    assert flows[0]["indexedAttributes"]["Amount"] == 500
    typed = await asyncio.to_thread(
        _dexcli, *base, "--type", "SearchOrder", "--status", "running", "--query", query
    )
    assert [f["flowId"] for f in json.loads(typed.stdout)["flows"]] == [names[k] for k in "dbac"]
    table = await asyncio.to_thread(
        _dexcli, "--server", stack.server.address, "flow", "list", "--query", query
    )
    assert table.returncode == 0 and names["d"] in table.stdout and "INDEXED" in table.stdout
    bad = await asyncio.to_thread(_dexcli, *base, "--query", "Amount >")
    assert bad.returncode == 1 and "at position 8" in bad.stderr, bad.stderr
