"""Credentials: FileCredential, ApiKeyCredential against a loopback token endpoint, and how
the transports turn any credential into an ``Authorization`` header per request."""

from __future__ import annotations

import http.server
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from dex import (
    ApiKeyCredential,
    ApiKeyExchangeError,
    ClientOptions,
    Credential,
    FileCredential,
    WorkerOptions,
)
from dex._credential import BearerAuth, resolve_token, resolve_token_sync


class _Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


# --------------------------------------------------------------------------- FileCredential


def test_file_credential_reads_and_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("  first-token \n")
    credential = FileCredential(path)
    assert isinstance(credential, Credential)
    clock = _Clock(credential._checked_at)  # the fake clock starts at the first read
    credential._clock = clock
    assert credential.token() == "first-token"
    path.write_text("second-token-longer")
    clock.now += 0.5
    assert credential.token() == "first-token"  # checked at most once a second
    clock.now += 0.6
    assert credential.token() == "second-token-longer"
    path.write_text("third-token-sized!!")  # same size: the modification time tells
    os.utime(path, ns=(1, 1))
    clock.now += 1.0
    assert credential.token() == "third-token-sized!!"


def test_file_credential_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        FileCredential(tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.write_text(" \n")
    with pytest.raises(ValueError, match="is empty"):
        FileCredential(empty)
    path = tmp_path / "token"
    path.write_text("t")
    credential = FileCredential(path)
    clock = _Clock(credential._checked_at)
    credential._clock = clock
    path.unlink()
    clock.now += 2
    with pytest.raises(FileNotFoundError):
        credential.token()


# --------------------------------------------------------------------------- ApiKeyCredential


class _Endpoint:
    """A loopback token endpoint answering with the next scripted (status, body)."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], bytes]] = []
        self.answers: list[tuple[int, Any]] = []
        endpoint = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.requests.append((dict(self.headers), body))
                status, answer = endpoint.answers.pop(0)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}/token"

    def grant(self, token: str, expires_in: int = 100) -> None:
        self.answers.append(
            (200, {"access_token": token, "token_type": "Bearer", "expires_in": expires_in})
        )


@pytest.fixture
def endpoint() -> Iterator[_Endpoint]:
    ep = _Endpoint()
    yield ep
    ep.server.shutdown()
    ep.server.server_close()


def test_api_key_exchange_and_cache(endpoint: _Endpoint) -> None:
    credential = ApiKeyCredential(endpoint.url, "srv-1", "secret-key")
    clock = _Clock()
    credential._clock = clock
    endpoint.grant("tok-1", expires_in=100)
    assert credential.token() == "tok-1"
    headers, body = endpoint.requests[0]
    assert json.loads(body) == {"server_id": "srv-1", "api_key": "secret-key"}
    assert headers["Content-Type"] == "application/json"
    clock.now += 79
    assert credential.token() == "tok-1"  # cached until 80 % of its lifetime
    assert len(endpoint.requests) == 1
    endpoint.grant("tok-2", expires_in=100)
    clock.now += 2
    assert credential.token() == "tok-2"  # renewed
    # a failed renewal keeps the still valid token, then retries after 5 s
    clock.now += 81
    endpoint.answers.append((500, {}))
    assert credential.token() == "tok-2"
    clock.now += 1
    assert credential.token() == "tok-2"
    assert len(endpoint.requests) == 3
    clock.now += 20  # expired now: the next exchange must succeed
    endpoint.answers.append((401, {"error": "invalid_client", "error_description": "bad key"}))
    with pytest.raises(ApiKeyExchangeError, match="HTTP status 401.*error=invalid_client"):
        credential.token()
    credential.close()
    with pytest.raises(RuntimeError, match="closed"):
        credential.token()
    credential.close()


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        ((200, {"access_token": "t", "token_type": "Bearer"}), "invalid expires_in"),
        ((200, {"access_token": "t", "token_type": "Bearer", "expires_in": 0}), "expires_in"),
        ((200, {"access_token": "t", "token_type": "Bearer", "expires_in": "60"}), "expires_in"),
        ((200, {"token": "t", "token_type": "Bearer", "expires_in": 60}), "invalid access_token"),
        ((200, {"access_token": "t", "token_type": "mac", "expires_in": 60}), "token_type"),
        ((200, b"not json"), "invalid JSON response"),
        ((503, b"down"), "HTTP status 503"),
    ],
)
def test_api_key_exchange_rejects_bad_answers(
    endpoint: _Endpoint, answer: tuple[int, Any], reason: str
) -> None:
    endpoint.answers.append(answer)
    with pytest.raises(ApiKeyExchangeError, match=reason):
        ApiKeyCredential(endpoint.url, "srv", "k-123456").token()


def test_api_key_errors_redact_the_key(endpoint: _Endpoint) -> None:
    endpoint.answers.append((401, {"error": "invalid_client", "error_description": "key k-999"}))
    with pytest.raises(ApiKeyExchangeError) as raised:
        ApiKeyCredential(endpoint.url, "srv", "k-999").token()
    assert "k-999" not in str(raised.value) and "[REDACTED]" in str(raised.value)


def test_api_key_unreachable_endpoint() -> None:
    credential = ApiKeyCredential("http://127.0.0.1:1/token", "s", "key-1", exchange_timeout=2)
    with pytest.raises(ApiKeyExchangeError, match="HTTP status unavailable"):
        credential.token()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("", "s", "k"), "non-empty"),
        (("https://id.example/t", "", "k"), "non-empty"),
        (("https://id.example/t", "s", ""), "non-empty"),
        (("http://id.example/t", "s", "k"), "HTTPS outside loopback"),
        (("ftp://x/t", "s", "k"), "absolute HTTPS URL"),
        (("not a url", "s", "k"), "absolute HTTPS URL"),
        (("https://u:p@id.example/t", "s", "k"), "user info"),
        (("https://id.example/t#f", "s", "k"), "fragment"),
    ],
)
def test_api_key_credential_validation(args: tuple[str, str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ApiKeyCredential(*args)


def test_api_key_credential_accepts_https_and_loopback() -> None:
    for url in ("https://id.example/t?x=1", "http://localhost:1/t", "http://[::1]:1/t"):
        ApiKeyCredential(url, "s", "k")
    for timeout in (0, -1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="exchange_timeout"):
            ApiKeyCredential("https://id.example/t", "s", "k", exchange_timeout=timeout)


# --------------------------------------------------------------------------- transports


class _AsyncToken:
    def __init__(self) -> None:
        self.calls = 0

    async def _next(self) -> str:
        self.calls += 1
        return f"async-{self.calls}"

    def token(self) -> Any:
        return self._next()


async def test_bearer_auth_resolves_the_token_per_request(tmp_path: Path) -> None:
    seen: list[str | None] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("Authorization"))
        return httpx.Response(200)

    transport = httpx.MockTransport(handler)
    credential = _AsyncToken()
    async with httpx.AsyncClient(transport=transport, auth=BearerAuth(credential)) as http:
        await http.get("http://dex/a")
        await http.get("http://dex/b")
    assert seen == ["Bearer async-1", "Bearer async-2"]
    path = tmp_path / "token"
    path.write_text("file-token")
    with httpx.Client(transport=transport, auth=BearerAuth(FileCredential(path))) as sync_http:
        sync_http.get("http://dex/c")
    assert seen[-1] == "Bearer file-token"
    with pytest.raises(TypeError, match="returns a str"):
        resolve_token_sync(_AsyncToken())
    assert await resolve_token("plain") == "plain"
    assert await resolve_token(None) is None
    assert await resolve_token("") is None


def test_options_accept_credentials(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("t")
    credential = FileCredential(path)
    assert WorkerOptions(credential=credential).credential is credential
    assert WorkerOptions(credential="token").credential == "token"
    assert ClientOptions(credential=credential).credential is credential
    with pytest.raises(TypeError, match="credential"):
        WorkerOptions(credential=42)  # type: ignore[arg-type]
