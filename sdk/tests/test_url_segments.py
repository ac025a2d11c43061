"""Path segments the SDK builds, and how it reads a 404 that is not the server's."""

from __future__ import annotations

from urllib.parse import unquote

import httpx
from dex._client._defs import quote_segment
from dex._transport import error_from_response
from dex.errors import DexServiceError, FlowNotFoundError, StatusCode
from hypothesis import given
from hypothesis import strategies as st


def test_dot_segments_and_reserved_characters_are_encoded() -> None:
    assert quote_segment(".") == "%2E" and quote_segment("..") == "%2E%2E"
    assert quote_segment("a/b") == "a%2Fb" and quote_segment("%") == "%25"
    url = httpx.URL(f"http://h/v1/flows/{quote_segment('..')}/state")
    assert url.raw_path == b"/v1/flows/%2E%2E/state"  # not resolved to /v1/state


@given(st.text(min_size=1))
def test_a_segment_is_one_segment_and_decodes_back(value: str) -> None:
    segment = quote_segment(value)
    assert "/" not in segment and segment not in (".", "..")
    assert unquote(segment, errors="surrogatepass") == value


def test_a_plain_404_is_not_flow_not_found() -> None:
    plain = httpx.Response(404, text="Not Found")
    error = error_from_response(plain, flow_id="f")
    assert type(error) is DexServiceError and error.error_code == "NOT_FOUND"
    assert error.code is StatusCode.NOT_FOUND
    api = httpx.Response(404, json={"code": "FLOW_NOT_FOUND", "message": "no Flow 'f'"})
    assert isinstance(error_from_response(api, flow_id="f"), FlowNotFoundError)
