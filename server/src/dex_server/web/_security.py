"""Dex Web's sessions and CSRF protection.

A browser session is a random nonce signed with a key derived from the server token (or,
without a token, from a random key of this process). The cookie holds
``<nonce>.<signature>``; it is HttpOnly, SameSite=Strict and scoped to ``/ui``. Each
session's CSRF token is another signature of its nonce, so every server sharing the token
checks both without storing anything. A state-changing request must carry the CSRF token
in its form and must not come from another origin (``Origin`` / ``Sec-Fetch-Site``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from starlette.requests import Request

COOKIE = "dex_web_session"
COOKIE_PATH = "/ui"


class WebSecurity:
    """Signs and checks session cookies and CSRF tokens for one server.

    Args:
        token: the server's bearer token; ``None`` means no login (loopback dev servers),
            but sessions and CSRF tokens are still issued and checked.

    """

    def __init__(self, token: str | None) -> None:
        self.token = token
        seed = token.encode() if token is not None else secrets.token_bytes(32)
        self._key = hashlib.sha256(b"dex-web-session-key\0" + seed).digest()

    def _sign(self, purpose: str, nonce: str) -> str:
        return hmac.new(self._key, f"{purpose}:{nonce}".encode(), hashlib.sha256).hexdigest()

    def new_session(self) -> tuple[str, str]:
        """Return ``(nonce, cookie value)`` for a new browser session."""
        nonce = secrets.token_urlsafe(18)
        return nonce, f"{nonce}.{self._sign('session', nonce)}"

    def session_of(self, request: Request) -> str | None:
        """The session nonce of a request with a valid cookie, else None."""
        value = request.cookies.get(COOKIE, "")
        nonce, _, sig = value.partition(".")
        if not nonce or not hmac.compare_digest(sig, self._sign("session", nonce)):
            return None
        return nonce

    def csrf_token(self, nonce: str) -> str:
        """The CSRF token forms of session ``nonce`` must send back."""
        return self._sign("csrf", nonce)

    def check_token(self, candidate: str) -> bool:
        """Whether ``candidate`` is the server token (constant time)."""
        return self.token is not None and hmac.compare_digest(
            candidate.encode(), self.token.encode()
        )

    def refusal(self, request: Request, nonce: str | None, form: dict[str, str]) -> str | None:
        """Why a state-changing request must be refused, or None when it may proceed."""
        if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return "the request came from another site"
        origin = request.headers.get("origin")
        if origin is not None and origin != _own_origin(request):
            return f"the request came from origin {origin}, not this server"
        if nonce is None:
            return "no Dex Web session: reload the page"
        if not hmac.compare_digest(form.get("csrf", ""), self.csrf_token(nonce)):
            return "the form's CSRF token is missing or wrong: reload the page"
        return None


def _own_origin(request: Request) -> str:
    return f"{request.url.scheme}://{request.headers.get('host', request.url.netloc)}"


def set_cookie_header(value: str, *, secure: bool) -> str:
    """The ``Set-Cookie`` header value of a session cookie."""
    flags = "; Secure" if secure else ""
    return f"{COOKIE}={value}; Path={COOKIE_PATH}; HttpOnly; SameSite=Strict{flags}"
