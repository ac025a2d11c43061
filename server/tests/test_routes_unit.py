"""A defect inside a route handler still answers with an ApiError body, and is logged."""

from __future__ import annotations

import logging
from collections.abc import Callable

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


class _Item(msgspec.Struct):
    name: str


class _Body(msgspec.Struct):
    request_id: str = "r"
    reason: str = "fine"
    items: list[_Item] = []
    labels: dict[str, str] = {}


_EDGE_STRINGS = [
    "plain",
    "",
    "q" * 1024,
    "q" * 1025,
    "q" * 65_536,
    "q" * 65_537,
    "é" * 32_768,
    "é" * 32_769,
    "a\x00b",
    "\ud800",
    "naïve",
]


def _outcome(check: Callable[..., object], *args: object) -> tuple[str, str] | None:
    from dex_server.service._common import ServiceError

    try:
        check(*args)
    except ServiceError as exc:
        return exc.code, str(exc)
    return None


@pytest.mark.parametrize("text", _EDGE_STRINGS, ids=lambda t: f"{t[:6]!r}x{len(t)}")
def test_a_body_string_is_refused_exactly_when_check_text_refuses_it(text: str) -> None:
    """Each string of a body, wherever it sits, passes the checks and limits of its place."""
    from dex_server.api._paths import MAX_REQUEST_ID_BYTES, check_strings, check_text

    places = [
        (_Body(request_id=text), "request_id", "max_request_id_bytes", MAX_REQUEST_ID_BYTES),
        (_Body(reason=text), "reason", "max_string_bytes", 0),
        (_Body(items=[_Item("a"), _Item(text)]), "items[1].name", "max_string_bytes", 0),
        (_Body(labels={text: "v"}), "labels key", "max_string_bytes", 0),
        (_Body(labels={"k": text}), "labels['k']", "max_string_bytes", 0),
    ]
    for body, where, limit, maximum in places:
        assert _outcome(check_text, text, where, limit, maximum) == _outcome(
            check_strings, body, ""
        ), where
    assert check_text("naïve", "x") == "naïve"
