"""Dex Web without a browser: routing, the --no-web switch, sessions, CSRF and escaping."""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from pathlib import Path

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
