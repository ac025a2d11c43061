"""Credentials: where the bearer token that Clients and Workers send comes from.

A ``Credential`` is anything with a ``token()`` method returning the token (or an
awaitable of it). ``FileCredential`` reads it from a file and follows changes of the file;
``ApiKeyCredential`` exchanges an API key for short-lived tokens at a token endpoint. A
plain string is a fixed token.

The transports call ``resolve_token`` for every HTTP request and for every WebSocket
connection, so a rotated token is picked up without restarting the process.
"""

from __future__ import annotations

import asyncio
import inspect
import ipaddress
import logging
import math
import os
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Generator
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import urlsplit

import httpx

from dex.errors import ApiKeyExchangeError

__all__ = [
    "ApiKeyCredential",
    "ApiKeyExchangeError",
    "BearerAuth",
    "Credential",
    "CredentialLike",
    "FileCredential",
    "bearer_auth",
    "check_credential",
    "resolve_token",
    "resolve_token_sync",
]

log = logging.getLogger("dex.credential")

_FILE_RECHECK_S = 1.0
_REFRESH_SHARE = 0.8  # a token is renewed after 80 % of its lifetime
_RETRY_S = 5.0  # a failed renewal of a still valid token is tried again after this


@runtime_checkable
class Credential(Protocol):
    """A source of bearer tokens for Clients and Workers.

    ``token()`` returns the token to send now, or an awaitable of it. It is called for
    every request (and every Worker connection), so it must be quick: cache the token
    and renew it before it expires. It may be called from several threads at once.
    """

    def token(self) -> str | Awaitable[str]:
        """Return the bearer token (without the ``Bearer`` prefix)."""
        ...


CredentialLike = Credential | str | None
"""What ``ClientOptions.credential`` and ``WorkerOptions.credential`` accept: a
``Credential``, a fixed token string, or None for no token."""


class FileCredential:
    """A bearer token kept in a file, e.g. one a secret manager rotates.

    The file holds the token; surrounding whitespace is ignored. The file is read when the
    credential is built and read again when its size or modification time changed, which
    ``token()`` checks at most once a second.

    Args:
        path: the token file.

    Raises:
        OSError: the file cannot be read (``FileNotFoundError`` when missing), at
            construction or by a later ``token()``.
        ValueError: the file is empty.

    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._path = Path(path)
        self._lock = threading.Lock()
        self._clock: Callable[[], float] = time.monotonic
        self._token = ""
        self._stamp: tuple[int, int] | None = None
        self._checked_at = 0.0
        with self._lock:
            self._reload_locked()

    @property
    def path(self) -> Path:
        """The token file."""
        return self._path

    def token(self) -> str:
        """Return the token, re-reading the file when it changed (thread-safe)."""
        with self._lock:
            if self._clock() - self._checked_at >= _FILE_RECHECK_S:
                self._reload_locked()
            return self._token

    def _reload_locked(self) -> None:
        st = self._path.stat()
        self._checked_at = self._clock()
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        text = self._path.read_text(encoding="utf-8").strip()
        if not text:
            raise ValueError(f"credential file {self._path} is empty")
        self._token = text
        self._stamp = stamp

    def __repr__(self) -> str:
        return f"FileCredential({str(self._path)!r})"


class ApiKeyCredential:
    """Bearer tokens obtained by exchanging an API key at a token endpoint.

    ``token()`` POSTs ``{"server_id": ..., "api_key": ...}`` as JSON to ``token_url`` and
    expects a JSON answer ``{"access_token": str, "token_type": "Bearer",
    "expires_in": seconds}``. The token is cached and renewed after 80 % of its lifetime;
    if a renewal fails while the old token is still valid, the old one is used and the
    renewal is tried again 5 s later. Concurrent callers share one exchange.

    Args:
        token_url: absolute ``https://`` URL of the endpoint (``http://`` only on a
            loopback host); no user info or fragment.
        server_id: the Dex server the token is for.
        api_key: the secret API key.
        exchange_timeout: seconds one exchange may take (default 10).

    Raises:
        ValueError: an empty argument, a URL that breaks the rules above, or an
            ``exchange_timeout`` that is not a finite positive number.

    """

    def __init__(
        self,
        token_url: str,
        server_id: str,
        api_key: str,
        *,
        exchange_timeout: float = 10.0,
    ) -> None:
        if not token_url or not server_id or not api_key:
            raise ValueError("token_url, server_id and api_key must be non-empty")
        _check_token_url(token_url)
        if not (isinstance(exchange_timeout, int | float) and math.isfinite(exchange_timeout)):
            raise ValueError("exchange_timeout must be positive")
        if exchange_timeout <= 0:
            raise ValueError("exchange_timeout must be positive")
        self._token_url = token_url
        self._server_id = server_id
        self._api_key = api_key
        self._exchange_timeout = float(exchange_timeout)
        self._clock: Callable[[], float] = time.monotonic
        self._lock = threading.Lock()
        self._token = ""
        self._refresh_at = 0.0
        self._expires_at = 0.0
        self._retry_at = 0.0
        self._closed = False
        self._http: httpx.Client | None = None

    @property
    def token_url(self) -> str:
        """The token endpoint."""
        return self._token_url

    @property
    def server_id(self) -> str:
        """The server the tokens are for."""
        return self._server_id

    def token(self) -> str:
        """Return a valid token, exchanging the API key when needed (blocking, thread-safe).

        Raises:
            ApiKeyExchangeError: no valid token and the exchange failed.
            RuntimeError: the credential is closed.

        """
        with self._lock:
            if self._closed:
                raise RuntimeError("API key credential is closed")
            now = self._clock()
            if self._token and now < self._refresh_at:
                return self._token
            if self._token and now < self._expires_at:
                if now < self._retry_at:
                    return self._token
                try:
                    self._exchange_locked()
                except ApiKeyExchangeError as exc:
                    self._retry_at = now + _RETRY_S
                    log.warning("token renewal failed, using the current token: %s", exc)
                return self._token
            self._exchange_locked()
            return self._token

    def needs_exchange(self) -> bool:
        """Whether the next ``token()`` call may block on an exchange."""
        return not self._token or self._clock() >= self._refresh_at

    def close(self) -> None:
        """Drop the cached token and the connection pool; ``token()`` then raises."""
        with self._lock:
            self._closed = True
            self._token = ""
            if self._http is not None:
                self._http.close()
                self._http = None

    def _exchange_locked(self) -> None:
        if self._http is None:
            self._http = httpx.Client(timeout=self._exchange_timeout, follow_redirects=False)
        status: int | None = None
        try:
            response = self._http.post(
                self._token_url,
                json={"server_id": self._server_id, "api_key": self._api_key},
                headers={"Accept": "application/json"},
            )
        except httpx.HTTPError as exc:
            raise self._error(None, type(exc).__name__) from exc
        status = response.status_code
        try:
            payload = response.json()
        except ValueError:
            raise self._error(status, "invalid JSON response") from None
        if not isinstance(payload, dict):
            raise self._error(status, "invalid JSON response")
        if not 200 <= status < 300:
            reason = "exchange rejected"
            for field in ("error", "error_description"):
                value = payload.get(field)
                if isinstance(value, str) and value:
                    reason += f"; {field}={value}"
            raise self._error(status, reason)
        token = payload.get("access_token")
        if not isinstance(token, str) or not token:
            raise self._error(status, "invalid access_token")
        kind = payload.get("token_type")
        if not isinstance(kind, str) or kind.lower() != "bearer":
            raise self._error(status, "invalid token_type")
        lifetime = payload.get("expires_in")
        if isinstance(lifetime, bool) or not isinstance(lifetime, int) or lifetime <= 0:
            raise self._error(status, "invalid expires_in")
        now = self._clock()
        self._token = token
        self._refresh_at = now + lifetime * _REFRESH_SHARE
        self._expires_at = now + lifetime
        self._retry_at = 0.0

    def _error(self, status: int | None, reason: str) -> ApiKeyExchangeError:
        shown = "unavailable" if status is None else str(status)
        message = f"token exchange at {self._token_url} failed (HTTP status {shown}): {reason}"
        for secret in (self._api_key, self._token):
            if secret and len(secret) >= 4:
                message = message.replace(secret, "[REDACTED]")
        return ApiKeyExchangeError(message)

    def __repr__(self) -> str:
        return f"ApiKeyCredential({self._token_url!r}, {self._server_id!r}, api_key=<redacted>)"


def _check_token_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ValueError("token_url must be an absolute HTTPS URL")
    if parts.username is not None or parts.password is not None or parts.fragment:
        raise ValueError("token_url must not contain user info or a fragment")
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ValueError("token_url must use HTTPS outside loopback")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_credential(credential: object) -> None:
    """Raise ``TypeError`` unless ``credential`` is a ``CredentialLike``."""
    if credential is None or isinstance(credential, str):
        return
    if not callable(getattr(credential, "token", None)):
        raise TypeError(
            "credential must be a str token, a Credential (an object with token()) or None, "
            f"got {type(credential).__qualname__}"
        )


def _checked_token(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"Credential.token() must return a str, got {type(value).__qualname__}")
    return value


async def resolve_token(credential: CredentialLike) -> str | None:
    """Return the bearer token to send now (None: send no token).

    Blocking credentials (an ``ApiKeyCredential`` about to exchange) run in a thread, so
    the event loop is not held up by the exchange.
    """
    if credential is None or isinstance(credential, str):
        return credential or None
    if isinstance(credential, ApiKeyCredential) and credential.needs_exchange():
        return await asyncio.to_thread(credential.token)
    value = credential.token()
    if inspect.isawaitable(value):
        value = await value
    return _checked_token(value) or None


def resolve_token_sync(credential: CredentialLike) -> str | None:
    """``resolve_token`` for synchronous callers; an awaitable token is an error here."""
    if credential is None or isinstance(credential, str):
        return credential or None
    value = credential.token()
    if inspect.isawaitable(value):
        close = getattr(value, "close", None)
        if callable(close):
            close()
        raise TypeError("this caller needs a Credential whose token() returns a str")
    return _checked_token(value) or None


class BearerAuth(httpx.Auth):
    """httpx authentication that sends ``Authorization: Bearer <token>`` from a credential.

    The token is resolved for every request, so rotated tokens take effect at once.
    """

    def __init__(self, credential: CredentialLike) -> None:
        check_credential(credential)
        self._credential = credential

    def sync_auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response]:
        token = resolve_token_sync(self._credential)
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await resolve_token(self._credential)
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        yield request


def bearer_auth(credential: CredentialLike) -> BearerAuth | None:
    """Return the httpx auth for ``credential`` (None when there is no credential)."""
    if credential is None or credential == "":
        return None
    return BearerAuth(credential)
