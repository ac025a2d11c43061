"""The OpenAPI document covers every route and parameter, and the server honours it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dex_server.api._openapi import PUBLIC, openapi_document, query_parameters
from dex_server.api._paths import RawPathRoute
from dex_server.app import ServerConfig, build_app
from dex_server.testing import running_server
from starlette.datastructures import ImmutableMultiDict

from tests.test_edge_input import _start

DOC: dict[str, Any] = json.loads(openapi_document())


def _app_routes(tmp_path: Path) -> list[tuple[str, str]]:
    app = build_app(ServerConfig(database_path=tmp_path / "db.sqlite3"))
    found = []
    for route in app.routes:
        if isinstance(route, RawPathRoute):
            for method in route.methods or ():
                if method != "HEAD":
                    found.append((method.lower(), route.path))
    return found


def test_every_route_and_path_parameter_is_documented(tmp_path: Path) -> None:
    routes = _app_routes(tmp_path)
    documented = [(m, p) for p, ops in DOC["paths"].items() for m in ops]
    assert sorted(routes) == sorted(documented)
    for method, path in routes:
        op = DOC["paths"][path][method]
        in_path = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
        assert in_path == set(re.findall(r"{(\w+)}", path)), (method, path)
        assert "200" in op["responses"] and "405" in op["responses"]
        if (method, path) in PUBLIC:
            assert op["security"] == []
        else:
            assert "security" not in op and "401" in op["responses"]
        if in_path:
            assert "404" in op["responses"]
    assert DOC["security"] == [{"bearer": []}]
    assert DOC["paths"]["/v1/health"]["get"]["security"] == []


@pytest.fixture
def read_query_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    names: set[str] = set()
    real_get = ImmutableMultiDict.get

    def get(self: ImmutableMultiDict[Any, Any], key: Any, default: Any = None) -> Any:
        names.add(key)
        return real_get(self, key, default)

    monkeypatch.setattr(ImmutableMultiDict, "get", get)
    yield names


async def test_every_query_parameter_a_route_reads_is_documented(
    tmp_path: Path, read_query_names: set[str]
) -> None:
    documented = query_parameters()
    app = build_app(ServerConfig(database_path=tmp_path / "db.sqlite3"))
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://dex") as client,
    ):
        assert (await client.post("/v1/flows", content=_start("f"))).status_code == 200
        for method, path in _app_routes(tmp_path):
            concrete = path.replace("{flow_id}", "f").replace("{flow_type}", "Talker")
            concrete = concrete.replace("{stream}", "out").replace("{sha256}", "0" * 64)
            read_query_names.clear()
            names = documented.get((method, path), [])
            params = {"timeout_s": "0"} if "timeout_s" in names else {}
            body = b"{}" if method == "post" else None
            r = await client.request(method.upper(), concrete, params=params, content=body)
            assert r.status_code < 500, (method, path, r.text)
            assert read_query_names <= set(names), (method, path, read_query_names)
            if names:
                assert read_query_names, (method, path)


def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path: Path) -> None:
    """Fuzz every operation from the document (a short run; DEX_FUZZ_EXAMPLES for more)."""
    examples = os.environ.get("DEX_FUZZ_EXAMPLES", "5")
    st = Path(sys.executable).with_name("schemathesis")
    assert st.exists(), "schemathesis is a dev dependency: run uv sync"

    async def fuzz() -> subprocess.CompletedProcess[str]:
        async with running_server(tmp_path / "srv", token="fuzz", fsync=False) as srv:
            return await asyncio.to_thread(
                subprocess.run,
                [
                    str(st),
                    "run",
                    f"{srv.url}/openapi.json",
                    "--header",
                    "Authorization: Bearer fuzz",
                    "--checks",
                    "all",
                    # valid-shaped requests may still be refused on meaning (an unknown Flow
                    # type, an empty Stream source): a 4xx there is no bug
                    "--exclude-checks",
                    "positive_data_acceptance",
                    "--max-examples",
                    examples,
                    "--workers",
                    "1",
                    "--seed",
                    os.environ.get("DEX_FUZZ_SEED", "1"),
                    "--generation-database",
                    "none",
                    "--request-timeout",
                    "70",
                    "--no-color",
                    "--report",
                    "junit",
                    "--report-dir",
                    str(tmp_path / "report"),
                ],
                capture_output=True,
                text=True,
                cwd=tmp_path,
                timeout=900,
                check=False,
            )

    done = asyncio.run(fuzz())
    print(done.stdout)  # the counts of generated cases, kept in the test log
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert re.search(r"\d+ generated, \d+ passed", done.stdout), done.stdout[-2000:]
