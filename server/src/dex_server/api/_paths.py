"""Routing on the raw request path, and the checks every client-supplied string passes.

Routes match on ``scope["raw_path"]`` split at ``/`` *before* percent-decoding, so an ID
that holds ``/``, ``.``, ``..`` or ``%`` (sent as ``%2F``, ``%2E``, ``%25``) stays one path
segment and is never confused with another route or another Flow.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote_to_bytes

import msgspec
from dex._protocol import ErrorCode
from starlette.routing import Match, Route
from starlette.types import Scope

from dex_server.service._common import ServiceError

# Largest string a client may send in a request body or path, but for the IDs below.
MAX_STRING_BYTES = 64 * 1024
# Largest request_id (the idempotency key of starts and RPCs).
MAX_REQUEST_ID_BYTES = 1024
# Largest path segment other than a Flow ID (Flow type, Stream name, blob hash).
MAX_SEGMENT_BYTES = 1024

_FIELD_LIMITS = {"request_id": ("max_request_id_bytes", MAX_REQUEST_ID_BYTES)}


def raw_segments(scope: Scope) -> list[bytes]:
    """The request path's segments, still percent-encoded (``/a%2Fb/c`` → ``a%2Fb``, ``c``)."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        raw = quote(scope["path"]).encode("ascii")
    return raw.split(b"?", 1)[0].split(b"/")[1:]


def decode_segment(raw: bytes) -> str:
    """Percent-decode one segment; bytes that are not UTF-8 become lone surrogates.

    :func:`check_text` refuses such strings, so a bad path gets ``BAD_REQUEST``, not a
    routing miss.
    """
    return unquote_to_bytes(raw).decode("utf-8", "surrogateescape")


def is_path(scope: Scope, path: str) -> bool:
    """Whether the request path is ``path`` (segment by segment, as routing sees it)."""
    want = path.split("/")[1:]
    got = raw_segments(scope)
    if len(got) != len(want):
        return False
    return all(decode_segment(g) == w for g, w in zip(got, want, strict=True))


class RawPathRoute(Route):
    """A ``Route`` whose ``{param}`` segments are one raw path segment each, decoded after.

    The path template is literal segments and ``{name}`` segments; a parameter matches any
    non-empty segment, whatever it decodes to.
    """

    def __init__(self, path: str, endpoint: Any, **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        self._template = path.split("/")[1:]

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        if scope["type"] != "http":
            return Match.NONE, {}
        got = raw_segments(scope)
        if len(got) != len(self._template):
            return Match.NONE, {}
        params: dict[str, Any] = {}
        for raw, want in zip(got, self._template, strict=True):
            if want.startswith("{"):
                if not raw:
                    return Match.NONE, {}
                params[want[1:-1]] = decode_segment(raw)
            elif decode_segment(raw) != want:
                return Match.NONE, {}
        child = {"endpoint": self.endpoint, "path_params": params}
        if self.methods and scope["method"] not in self.methods:
            return Match.PARTIAL, child
        return Match.FULL, child


def check_text(value: str, what: str, limit: str = "max_string_bytes", maximum: int = 0) -> str:
    """Return ``value`` if the server can store it; else raise ``BAD_REQUEST``/``LIMIT_EXCEEDED``.

    Refused: a NUL character (PostgreSQL cannot store it in text), text that is not valid
    Unicode (lone surrogates), and more than ``maximum`` UTF-8 bytes (default
    :data:`MAX_STRING_BYTES`).
    """
    maximum = maximum or MAX_STRING_BYTES
    if "\x00" in value:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"{what} must not contain a NUL character")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ServiceError(ErrorCode.BAD_REQUEST, f"{what} is not valid UTF-8 text") from None
    if size > maximum:
        raise ServiceError(
            ErrorCode.LIMIT_EXCEEDED, f"{what} is {size} bytes, over the limit {limit}={maximum}"
        )
    return value


def check_strings(obj: object, where: str) -> None:
    """Apply :func:`check_text` to every string of a decoded request body (not to values).

    Values (``msgspec.Raw``) are JSON and may hold any escaped character; names, IDs and
    reasons are stored as text and may not.
    """
    # Nearly every body holds only short ASCII strings: one walk without the places' names
    # clears it (a Flow start's spec holds hundreds); the walk that names the place of
    # the string at fault runs only if that one finds a string it cannot clear alone.
    if not _plain(obj):
        _check_strings(obj, where)


def _plain(obj: object) -> bool:
    """Whether every string in ``obj`` is short ASCII without NUL (passes every limit)."""
    if isinstance(obj, str):
        return len(obj) <= MAX_REQUEST_ID_BYTES and obj.isascii() and "\x00" not in obj
    if isinstance(obj, msgspec.Struct):
        for name in obj.__struct_fields__:
            value = getattr(obj, name)
            if value is not None and not isinstance(value, _NO_STRINGS) and not _plain(value):
                return False
        return True
    if isinstance(obj, list | tuple):
        for item in obj:
            if item is not None and not isinstance(item, _NO_STRINGS) and not _plain(item):
                return False
        return True
    if isinstance(obj, dict):
        for key, item in obj.items():
            if not _plain(key):
                return False
            if item is not None and not isinstance(item, _NO_STRINGS) and not _plain(item):
                return False
        return True
    return True


def _check_strings(obj: object, where: str) -> None:
    if isinstance(obj, str):
        field = where.rsplit(".", 1)[-1]
        limit, maximum = _FIELD_LIMITS.get(field, ("max_string_bytes", MAX_STRING_BYTES))
        check_text(obj, where, limit, maximum)
    elif isinstance(obj, msgspec.Struct):
        for name in obj.__struct_fields__:
            value = getattr(obj, name)
            if value is not None and not isinstance(value, _NO_STRINGS):
                _check_strings(value, f"{where}.{name}" if where else name)
    elif isinstance(obj, list | tuple):
        for i, item in enumerate(obj):
            if item is not None and not isinstance(item, _NO_STRINGS):
                _check_strings(item, f"{where}[{i}]")
    elif isinstance(obj, dict):
        for key, item in obj.items():
            _check_strings(key, f"{where} key")
            if item is not None and not isinstance(item, _NO_STRINGS):
                _check_strings(item, f"{where}[{key[:40]!r}]")


# what holds no string to check: skipped before its place in the body is spelled out
_NO_STRINGS = (bool, int, float, msgspec.Raw)
