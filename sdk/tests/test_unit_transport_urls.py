"""The HTTP transport's request URLs: absolute URLs parsed once per path reach the same place.

A plain HTTP server on a loopback port records the request lines it gets; the transport
talks to it with a base path, quoted segments and query parameters, repeatedly.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from dex._transport import _MAX_CACHED_URLS, HttpTransport


class _Recorder(BaseHTTPRequestHandler):
    seen: list[str] = []

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        self.rfile.read(length)
        self.seen.append(f"{self.command} {self.path}")
        body = b"{}"
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    seen: list[str] = []
    handler = type("Handler", (_Recorder,), {"seen": seen})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.parametrize("lean", [True, False], ids=["lean", "httpx"])
async def test_paths_params_and_a_base_path_reach_the_server_as_before(
    server: tuple[str, list[str]], lean: bool
) -> None:
    address, seen = server
    transport = HttpTransport(address + "/dex", credential=None, timeout=5, lean=lean)
    try:
        for _ in range(2):  # the second time from the cache
            await transport.raw("GET", "/v1/flows/a%2Fb%20c/history", params={"page_size": "5"})
            await transport.raw("POST", "/v1/flows/a%2Fb%20c/rpc", body={"rpc_name": "r"})
        await transport.raw("GET", "/v1/health")
    finally:
        await transport.aclose()
    assert seen == [
        "GET /dex/v1/flows/a%2Fb%20c/history?page_size=5",
        "POST /dex/v1/flows/a%2Fb%20c/rpc",
    ] * 2 + ["GET /dex/v1/health"]


async def test_the_url_cache_stays_bounded(server: tuple[str, list[str]]) -> None:
    address, seen = server
    transport = HttpTransport(address, credential=None, timeout=5, lean=False)
    try:
        for n in range(_MAX_CACHED_URLS + 10):
            await transport.raw("GET", f"/v1/flows/f{n}")
        assert transport._urls is not None and len(transport._urls) <= _MAX_CACHED_URLS
    finally:
        await transport.aclose()
    assert seen[-1] == f"GET /v1/flows/f{_MAX_CACHED_URLS + 9}"


async def test_a_given_http_client_keeps_its_own_base_url(server: tuple[str, list[str]]) -> None:
    address, seen = server
    http = httpx.AsyncClient(base_url=f"http://{address}/mine")
    transport = HttpTransport("unused.invalid:1", credential=None, timeout=5, http=http)
    try:
        await transport.raw("GET", "/v1/health")
    finally:
        await transport.aclose()
    assert seen == ["GET /mine/v1/health"]
