"""Dex Web without a browser: routing, the --no-web switch, sessions, CSRF and escaping."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest
from dex_server.app import ServerConfig, build_app
from dex_server.cli._serve import DevArgs, dev_config
from dex_server.web._html import Safe, h, tag

with warnings.catch_warnings():
    # this Starlette asks for ``httpx2`` and warns when it finds ``httpx``, which works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

BASE = "http://testserver"


def _client(tmp_path: Path, **overrides: object) -> Iterator[TestClient]:
    config = ServerConfig(database_path=tmp_path / "dex.sqlite3", **overrides)  # type: ignore[arg-type]
    with TestClient(build_app(config), base_url=BASE, follow_redirects=False) as client:
        yield client


@pytest.fixture
def open_ui(tmp_path: Path) -> Iterator[TestClient]:
    yield from _client(tmp_path)


@pytest.fixture
def token_ui(tmp_path: Path) -> Iterator[TestClient]:
    yield from _client(tmp_path, token="t0ken")


def _csrf(html: str) -> str:
    match = re.search(r'name="csrf" value="([0-9a-f]+)"', html)
    assert match is not None, html
    return match.group(1)


def test_root_redirects_to_dex_web(open_ui: TestClient) -> None:
    r = open_ui.get("/")
    assert r.status_code == 303
    assert r.headers["location"] == "/ui/flows"


def test_pages_set_a_strict_http_only_session_cookie_and_a_self_only_script_policy(
    open_ui: TestClient,
) -> None:
    r = open_ui.get("/ui/flows")
    assert r.status_code == 200
    assert "<table id=flows>" in r.text
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/ui" in cookie
    csp = r.headers["content-security-policy"]
    # only Dex Web's own script file: no inline script, no eval, no other origin
    assert "script-src 'self';" in csp and "unsafe" not in csp
    assert "default-src 'none'" in r.headers["content-security-policy"]


def test_no_web_serves_no_ui(tmp_path: Path) -> None:
    for client in _client(tmp_path, web=False):
        assert client.get("/ui/flows").status_code == 404
        assert client.get("/v1/health").status_code == 200
    for client in _client(tmp_path / "t", web=False, token="t"):
        assert client.get("/ui/flows").status_code == 401


def test_dexcli_dev_passes_the_web_switch(tmp_path: Path) -> None:
    args = dict(
        data_dir=tmp_path,
        host="127.0.0.1",
        port=0,
        address_file=None,
        retention="1d",
        engine="zd",
        token_file=None,
    )
    assert dev_config(DevArgs(**args)).web is True  # type: ignore[arg-type]
    assert dev_config(DevArgs(**args, web=False)).web is False  # type: ignore[arg-type]


def _sign_in(ui: TestClient) -> str:
    r = ui.post("/ui/login", data={"token": "t0ken"}, headers={"origin": BASE})
    assert r.status_code == 303, r.text
    return _csrf(ui.get("/ui/flows").text)


def test_pages_need_the_token_login(token_ui: TestClient) -> None:
    r = token_ui.get("/ui/flows")
    assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    assert token_ui.post("/ui/login", data={"token": "nope"}).status_code == 401
    assert "set-cookie" not in token_ui.post("/ui/login", data={"token": "nope"}).headers
    _sign_in(token_ui)
    assert token_ui.get("/ui/flows").status_code == 200
    # the API keeps its bearer token: the cookie opens Dex Web only
    assert token_ui.get("/v1/flows").status_code == 401


def test_a_form_post_needs_the_csrf_token_and_this_origin(token_ui: TestClient) -> None:
    csrf = _sign_in(token_ui)
    r = token_ui.post("/ui/logout", data={})
    assert r.status_code == 403 and "CSRF" in r.text
    r = token_ui.post("/ui/logout", data={"csrf": "0" * 64})
    assert r.status_code == 403
    r = token_ui.post("/ui/logout", data={"csrf": csrf}, headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and "origin" in r.text
    r = token_ui.post("/ui/logout", data={"csrf": csrf}, headers={"sec-fetch-site": "cross-site"})
    assert r.status_code == 403
    r = token_ui.post("/ui/logout", data={"csrf": csrf}, headers={"origin": BASE})
    assert r.status_code == 303 and "Max-Age=0" in r.headers["set-cookie"]


def test_a_login_from_another_site_is_refused(token_ui: TestClient) -> None:
    r = token_ui.post(
        "/ui/login", data={"token": "t0ken"}, headers={"origin": "http://evil.example"}
    )
    assert r.status_code == 403 and "set-cookie" not in r.headers


def test_escaping() -> None:
    assert h('<script>"x"</script>') == "&lt;script&gt;&quot;x&quot;&lt;/script&gt;"
    assert h(Safe("<b>")) == "<b>"
    assert tag("td", "<i>", title='"q"') == '<td title="&quot;q&quot;">&lt;i&gt;</td>'


def test_the_flow_list_filters_by_id_prefix_and_pages(open_ui: TestClient) -> None:
    from dex._protocol import FlowSpec, StartFlowRequest, StateDecl, encoder

    spec = FlowSpec(flow_type="Idle", state=[StateDecl(name="a", kind="attribute")])
    for fid in [*(f"p-{i:03d}" for i in range(60)), "q-1"]:
        req = StartFlowRequest(flow_type="Idle", flow_id=fid, spec=spec)
        assert open_ui.post("/v1/flows", content=encoder.encode(req)).status_code == 200
    first = open_ui.get("/ui/flows", params={"prefix": "p-"}).text
    ids = re.findall(r"<a href=\"/ui/flow\?id=([^\"]+)\">", first)
    assert ids == [f"p-{i:03d}" for i in range(59, 9, -1)]
    more = re.search(r'<a href="(/ui/flows\?[^"]+)">Next page</a>', first)
    assert more is not None
    second = open_ui.get(more.group(1).replace("&amp;", "&")).text
    ids = re.findall(r"<a href=\"/ui/flow\?id=([^\"]+)\">", second)
    assert ids == [f"p-{i:03d}" for i in range(9, -1, -1)]
    assert "Next page" not in second
    only_q = open_ui.get("/ui/flows", params={"prefix": "q-", "status": "running"}).text
    assert re.findall(r"<a href=\"/ui/flow\?id=([^\"]+)\">", only_q) == ["q-1"]
    assert open_ui.get("/ui/flows", params={"status": "bogus"}).status_code == 400


def _step_event(kind: str, step_type: str, eid: str, parent: str) -> tuple[str, bytes]:
    ctx = {"stepType": step_type, "stepExecutionId": eid, "fromStepExecutionId": parent}
    return kind, json.dumps({"context": ctx}).encode()


def test_the_step_graph_from_spec_history_and_live_executions() -> None:
    from dex._protocol import ActiveStepWire, FlowSpec, StepOptionsSpec, StepSpec
    from dex_server.web import _graph

    spec = FlowSpec(
        flow_type="Fan",
        start_step="Split",
        steps=[
            StepSpec(step_type="Split"),
            StepSpec(step_type="Work", has_wait_for=True),
            StepSpec(step_type="Join", options=StepOptionsSpec(execute_failure_step="Repair")),
            StepSpec(step_type="Repair"),
        ],
    )
    events = [
        _step_event("StepExecuteCompleted", "Split", "Split-1", "__start__"),
        *(_step_event("StepExecuteCompleted", "Work", f"Work-{n}", "Split-1") for n in (1, 2, 3)),
        _step_event("StepExecuteCompleted", "Join", "Join-1", "Work-3"),
        _step_event("StepExecuteCompleted", "Work", "Work-4", "Join-1"),
        ("FlowStarted", b"{}"),
    ]
    active = [
        ActiveStepWire(
            step_execution_id="Join-2",
            step_type="Join",
            from_step_execution_id="Work-4",
            phase="running_execute",
        ),
        ActiveStepWire(
            step_execution_id="Odd-1",
            step_type="Odd",
            from_step_execution_id="__rpc/poke",
            phase="waiting",
        ),
    ]
    g = _graph.build(spec, events, active)
    edges = {(e.source, e.target): e for e in g.edges}
    assert edges[("Split", "Work")].fan_out == 3 and edges[("Split", "Work")].count == 3
    assert edges[("Work", "Join")].count == 2 and edges[("Work", "Join")].fan_out == 1
    assert edges[("Join", "Repair")].failure_route
    assert edges[("__rpc/poke", "Odd")].count == 1
    assert g.nodes["Join"].active and g.nodes["Join"].active_phases == ["running_execute"]
    # Join moved to Work before, and its failure route is Repair: both are next
    assert g.nodes["Work"].next and g.nodes["Repair"].next and not g.nodes["Split"].next
    assert g.nodes["Split"].is_start and g.nodes["Work"].has_wait_for
    assert not g.nodes["Odd"].declared and g.nodes["Odd"].active
    assert g.nodes["Work"].runs == 4 and g.nodes["Repair"].runs == 0
    svg = _graph.render(g)
    assert 'data-step="Join"' in svg and "×3" in svg
    assert re.search(r'<g class="node active[^"]*" data-step="Join">', svg)
    assert re.search(r'<g class="node next[^"]*" data-step="Work">', svg)
    assert 'class="edge failure"' in svg


def test_the_step_graph_escapes_step_names() -> None:
    from dex_server.web import _graph

    g = _graph.build(
        None, [_step_event("StepExecuteCompleted", "<b>x</b>", "e-1", "__start__")], []
    )
    out = _graph.render(g)
    assert "<b>x" not in out and "&lt;b&gt;x" in out


def test_large_values_are_cut_with_a_link_and_escaped() -> None:
    from dex_server.web._html import LARGE_VALUE, value_block

    small = value_block(b'{"a": "<i>"}', "/ui/flow/value", id="f", name="a")
    assert "truncated" not in small and "&lt;i&gt;" in small
    raw = json.dumps({"a": "<script>" + "x" * LARGE_VALUE}).encode()
    big = value_block(raw, "/ui/flow/value", id="f", name="a/b c")
    assert 'class="json truncated"' in big and "<script>" not in big
    assert f"Load the whole value ({len(raw):,} bytes)" in big
    assert 'href="/ui/flow/value?id=f&amp;name=a%2Fb+c"' in big


def test_time_filters_parse_iso_times_as_utc() -> None:
    from dex_server.service._common import ServiceError
    from dex_server.web._panels import parse_time, time_input_value

    assert parse_time("x", "") is None
    assert parse_time("x", "1970-01-01T00:01") == 60.0
    assert parse_time("x", "1970-01-01T01:00:00+01:00") == 0.0
    assert parse_time("x", "1970-01-01T00:00:05Z") == 5.0
    assert time_input_value(60.0) == "1970-01-01T00:01:00"
    with pytest.raises(ServiceError, match="'soon' is not a date"):
        parse_time("Started after", "soon")


def test_the_flow_list_filters_by_start_time(open_ui: TestClient) -> None:
    import time

    from dex._protocol import FlowSpec, StartFlowRequest, StateDecl, encoder
    from dex_server.web._panels import time_input_value

    spec = FlowSpec(flow_type="Idle", state=[StateDecl(name="a", kind="attribute")])
    before = time.time() - 2
    for fid in ("t-1", "t-2"):
        req = StartFlowRequest(flow_type="Idle", flow_id=fid, spec=spec)
        assert open_ui.post("/v1/flows", content=encoder.encode(req)).status_code == 200

    def ids(**params: str) -> list[str]:
        r = open_ui.get("/ui/flows", params=params)
        assert r.status_code == 200, r.text
        return re.findall(r"<a href=\"/ui/flow\?id=([^\"]+)\">", r.text)

    assert ids(started_after=time_input_value(before)) == ["t-2", "t-1"]
    assert ids(started_before=time_input_value(before)) == []
    assert ids(started_after=time_input_value(before + 3600)) == []
    assert ids(started_before=time_input_value(before + 3600), prefix="t-1") == ["t-1"]
    r = open_ui.get("/ui/flows", params={"started_before": "31/12/2026"})
    assert r.status_code == 400 and "is not a date" in r.text and "<tbody></tbody>" in r.text
    # this server runs Flow search, so the form has its input
    assert "<input name=query" in r.text


def test_value_pages_check_what_they_show(open_ui: TestClient) -> None:
    from dex._protocol import FlowSpec, InitialAttribute, StartFlowRequest, StateDecl, encoder

    spec = FlowSpec(flow_type="Idle", state=[StateDecl(name="a", kind="attribute")])
    req = StartFlowRequest(flow_type="Idle", flow_id="v-1", spec=spec)
    req.initial_attributes = [InitialAttribute(name="a", value=msgspec.Raw(b'"<b>v</b>"'))]
    assert open_ui.post("/v1/flows", content=encoder.encode(req)).status_code == 200
    r = open_ui.get("/ui/flow/value", params={"id": "v-1", "name": "a"})
    assert r.status_code == 200 and "&quot;&lt;b&gt;v&lt;/b&gt;&quot;" in r.text
    assert open_ui.get("/ui/flow/value", params={"id": "v-1", "name": "zz"}).status_code == 404
    assert open_ui.get("/ui/flow/value", params={"id": "v-1"}).status_code == 400
    assert open_ui.get("/ui/flow/event", params={"id": "v-1", "event": "1"}).status_code == 200
    assert open_ui.get("/ui/flow/event", params={"id": "v-1", "event": "x"}).status_code == 400
    assert open_ui.get("/ui/flow/event", params={"id": "v-1", "event": "99"}).status_code == 404
    # only a blob the event refers to is served
    r = open_ui.get("/ui/flow/event", params={"id": "v-1", "event": "1", "blob": "0" * 64})
    assert r.status_code == 404
    page = open_ui.get("/ui/flow", params={"id": "v-1"}).text
    assert "<section id=step-graph>" in page and "<table id=timers>" in page


def test_an_active_step_that_has_not_moved_learns_next_steps_from_other_runs() -> None:
    from dex._protocol import ActiveStepWire, FlowSpec, StepSpec
    from dex_server.web import _graph

    spec = FlowSpec(
        flow_type="Loop",
        start_step="A",
        steps=[StepSpec(step_type=t) for t in ("A", "B", "C")],
    )
    events = [_step_event("StepExecuteCompleted", "A", "A-1", "__start__")]
    active = [
        ActiveStepWire(
            step_execution_id="B-1", step_type="B", from_step_execution_id="A-1", phase="waiting"
        )
    ]
    alone = _graph.build(spec, events, active)
    assert _graph.unmoved_active(alone) and not any(n.next for n in alone.nodes.values())
    other = [
        _step_event("StepExecuteCompleted", "A", "A-1", "__start__"),
        _step_event("StepExecuteCompleted", "B", "B-1", "A-1"),
        _step_event("StepExecuteCompleted", "C", "C-1", "B-1"),
    ]
    learned = _graph.moves(other)
    assert ("B", "C") in learned and ("__start__", "A") in learned
    g = _graph.build(spec, events, active, learned=learned)
    assert g.nodes["C"].next and not g.nodes["A"].next
    (edge,) = [e for e in g.edges if e.learned]
    assert (edge.source, edge.target) == ("B", "C")
    assert 'class="edge learned"' in _graph.render(g)


def test_the_session_notes_are_recognised_by_the_headers_dex_agents_writes() -> None:
    from dex_agents._text import FAILURE_NOTE_HEADER, STOPPED_NOTE_HEADER
    from dex_server.web._panels import is_note, note_label

    def user(text: str) -> dict[str, object]:
        return {"role": "user", "text": text + "\n- issue_refund: succeeded"}

    assert note_label(user(FAILURE_NOTE_HEADER)) == "turn-failure note"
    assert note_label(user(STOPPED_NOTE_HEADER.format(how="steered"))) == "steer note"
    assert note_label(user(STOPPED_NOTE_HEADER.format(how="cancelled"))) == "cancel note"
    assert is_note(user(FAILURE_NOTE_HEADER))
    assert not is_note({"role": "assistant", "text": FAILURE_NOTE_HEADER})
    assert not is_note({"role": "user", "text": "The previous turn failed, I think"})


def test_countdowns_and_durations_read_as_short_text() -> None:
    from dex_server.web._html import duration
    from dex_server.web._panels import countdown

    assert [duration(x) for x in (0.25, 12.34, 245, 7380)] == [
        "250 ms",
        "12.3 s",
        "4 min 5 s",
        "2 h 3 min",
    ]
    soon = countdown(1030.0, 1000.0)
    assert "30.0 s left" in soon and 'class="countdown soon"' in soon and "until" in soon
    assert 'data-deadline="1030.000"' in soon
    assert "deadline passed" in countdown(999.0, 1000.0)
    later = countdown(4600.0, 1000.0, until=False)
    assert "1 h 0 min left" in later and "soon" not in later and "until" not in later


def _start_indexed(ui: TestClient, fid: str, flow_type: str, **attrs: object) -> None:
    from dex._protocol import FlowSpec, InitialAttribute, StartFlowRequest, StateDecl, encoder

    spec = FlowSpec(
        flow_type=flow_type,
        state=[
            StateDecl(name="region", kind="attribute", index_type="keyword", index_key="Region"),
            StateDecl(name="amount", kind="attribute", index_type="int", index_key="Amount"),
        ],
    )
    req = StartFlowRequest(flow_type=flow_type, flow_id=fid, spec=spec)
    req.initial_attributes = [
        InitialAttribute(name=k, value=msgspec.Raw(json.dumps(v).encode()))
        for k, v in attrs.items()
    ]
    r = ui.post("/v1/flows", content=encoder.encode(req))
    assert r.status_code == 200, r.text


def _listed(html: str) -> list[str]:
    return re.findall(r"<a href=\"/ui/flow\?id=([^\"]+)\">", html)


def test_the_flow_list_searches_indexed_attributes_with_its_filters(open_ui: TestClient) -> None:
    from dex._protocol import StopFlowRequest, encoder

    for i in range(55):
        _start_indexed(open_ui, f"eu-{i:02d}", "Order", region="eu", amount=i)
    _start_indexed(open_ui, "us-1", "Order", region="us", amount=7)
    _start_indexed(open_ui, "eu-other", "Invoice", region="eu", amount=3)
    stop = StopFlowRequest(type="cancel", reason="test")
    assert open_ui.post("/v1/flows/eu-01/stop", content=encoder.encode(stop)).status_code == 200

    r = open_ui.get("/ui/flows", params={"query": "Region = 'us'"})
    assert r.status_code == 200, r.text
    assert _listed(r.text) == ["us-1"]
    assert "<th>Indexed Attributes</th>" in r.text
    assert '<div data-key="Amount">Amount = 7</div>' in r.text
    assert '<div data-key="Region">Region = &quot;us&quot;</div>' in r.text

    # Flow type, status, ID prefix and the query narrow together; OR keeps its meaning
    q = "Amount < 3 OR Region = 'us'"
    assert sorted(_listed(open_ui.get("/ui/flows", params={"query": q}).text)) == [
        "eu-00",
        "eu-01",
        "eu-02",
        "us-1",
    ]
    typed = open_ui.get("/ui/flows", params={"query": q, "flow_type": "Order", "prefix": "eu-"})
    assert sorted(_listed(typed.text)) == ["eu-00", "eu-01", "eu-02"]
    canceled = open_ui.get("/ui/flows", params={"query": q, "status": "canceled"})
    assert _listed(canceled.text) == ["eu-01"]
    later = open_ui.get("/ui/flows", params={"query": q, "started_after": "2999-01-01T00:00"})
    assert _listed(later.text) == [] and "No Flows match." in later.text
    ordered = open_ui.get("/ui/flows", params={"query": "Amount < 3 ORDER BY Amount DESC"})
    assert _listed(ordered.text) == ["eu-02", "eu-01", "eu-00"]

    # pages follow the search's own token and keep the query
    first = open_ui.get("/ui/flows", params={"query": "Region = 'eu'", "flow_type": "Order"})
    page1 = _listed(first.text)
    assert len(page1) == 50
    more = re.search(r'<a href="(/ui/flows\?[^"]+)">Next page</a>', first.text)
    assert more is not None and "query=" in more.group(1)
    second = open_ui.get(more.group(1).replace("&amp;", "&"))
    page2 = _listed(second.text)
    assert sorted(page1 + page2) == sorted(f"eu-{i:02d}" for i in range(55))
    assert "Next page" not in second.text

    # an empty query is the plain listing (no Indexed column)
    plain = open_ui.get("/ui/flows", params={"query": "  ", "prefix": "us-"})
    assert _listed(plain.text) == ["us-1"] and "Indexed Attributes" not in plain.text


def test_a_bad_query_shows_the_parser_message_and_runs_nothing(open_ui: TestClient) -> None:
    _start_indexed(open_ui, "o-1", "Order", region="eu", amount=1)
    query = "Region = 'eu' AND Amount >> 3"
    at = query.index(">>") + 1
    r = open_ui.get("/ui/flows", params={"query": query})
    assert r.status_code == 400
    assert "Not searched: search query:" in r.text
    assert f"at position {at} near &#x27;&gt;&#x27;" in r.text
    caret = re.search(r'<pre class="query-error" id="query-error">([^<]*)</pre>', r.text)
    assert caret is not None
    line, mark = caret.group(1).split("\n")
    assert mark.index("^") == at and line.startswith("Region = &#x27;eu&#x27;")
    assert "<tbody></tbody>" in r.text
    # the position is the person's own even with filters added around their text
    typed = open_ui.get("/ui/flows", params={"query": "Nope = 1", "flow_type": "Order"})
    assert typed.status_code == 400 and "unknown field &#x27;Nope&#x27;" in typed.text
    assert "at position 0" in typed.text
    token = open_ui.get("/ui/flows", params={"query": "Amount = 1", "page_token": "junk"})
    assert token.status_code == 400 and "bad page_token" in token.text


def test_listing_conditions_quote_values_and_keep_order_by_last() -> None:
    from dex_server.engine.query import (
        And,
        Compare,
        FieldType,
        listing_conditions,
        parse_query,
        with_conditions,
    )

    assert with_conditions("A = 1 OR B = 2", []) == "A = 1 OR B = 2"
    conds = listing_conditions(status="running", flow_type="it's", flow_id_prefix="a\\'b")
    text = with_conditions("A = 1 OR B = 2 ORDER BY A DESC", conds)
    assert text == (
        "ExecutionStatus = 'running' AND FlowType = 'it''s' AND FlowId STARTS_WITH 'a\\\\''b'"
        " AND (A = 1 OR B = 2) ORDER BY A DESC"
    )
    fields = {"A": FieldType.INT, "B": FieldType.INT}
    parsed = parse_query(text, fields)
    assert [o.field for o in parsed.order] == ["A"]
    assert isinstance(parsed.where, And)
    prefix = parsed.where.parts[2]
    assert isinstance(prefix, Compare) and prefix.values == ("a\\'b",)
    # a quoted 'ORDER BY' is text, not the ordering
    quoted_order = with_conditions("Name = 'x ORDER BY y'", ["A = 1"])
    assert quoted_order == "A = 1 AND (Name = 'x ORDER BY y')"
    times = listing_conditions(started_after=0.0, started_before=60.0)
    assert times == [
        "StartTime >= '1970-01-01T00:00:00+00:00'",
        "StartTime < '1970-01-01T00:01:00+00:00'",
    ]
    assert with_conditions("ORDER BY A", ["A = 1"]) == "A = 1 ORDER BY A"
