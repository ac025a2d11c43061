"""A defect inside a route handler still answers with an ApiError body, and is logged."""

from __future__ import annotations

import logging

import msgspec
import pytest
from dex._protocol import ApiError
from dex_server.api._routes import _guard
from starlette.requests import Request
from starlette.responses import Response


def _request() -> Request:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/flows/x",
        "raw_path": b"/v1/flows/x",
        "query_string": b"",
        "headers": [],
    }
    return Request(scope)


async def test_an_unexpected_exception_is_a_500_api_error_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(request: Request) -> Response:
        raise KeyError("no such thing")

    with caplog.at_level(logging.ERROR, logger="dex_server.api"):
        response = await _guard(broken)(_request())
    assert response.status_code == 500
    assert response.headers["content-type"].startswith("application/json")
    error = msgspec.json.decode(bytes(response.body), type=ApiError)
    assert error.code == "INTERNAL"
    assert "KeyError" in error.message
    assert any("GET /v1/flows/x failed" in r.getMessage() for r in caplog.records)
    assert any(r.exc_info is not None for r in caplog.records)
