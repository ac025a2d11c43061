"""HTTP helpers shared by the Client and the Worker: addresses, auth, error mapping.

Every non-2xx answer of the server carries an ``ApiError`` body; ``raise_for_status`` turns
it into the ``dex.errors`` class of its code. Failing to reach the server at all becomes
``ServiceUnavailableError`` (retryable); a client-side read timeout becomes
``RequestTimeoutError``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import httpx
import msgspec

from dex._credential import CredentialLike, bearer_auth, resolve_token
from dex._env import unix_socket_path
from dex._protocol import HTTP_STATUS, ApiError, ErrorCode, encoder
from dex.errors import DexError, DexServiceError, FeatureNotAvailableError, error_from_code

if TYPE_CHECKING:
    from dex._http1 import Http1Pool

T = TypeVar("T")

_CODE_BY_STATUS: dict[int, str] = {}
for _code, _status in HTTP_STATUS.items():
    _CODE_BY_STATUS.setdefault(_status, _code)
_CODE_BY_STATUS[503] = ErrorCode.UNAVAILABLE
# a 404 without an ApiError body comes from something else than the Dex server's Flow
# lookups (a proxy, a wrong base URL): it is not a FlowNotFoundError
_CODE_BY_STATUS[404] = ErrorCode.NOT_FOUND
_CODE_BY_STATUS[400] = ErrorCode.BAD_REQUEST

_api_error_decoder = msgspec.json.Decoder(ApiError)

# (method, path) -> the Client call a request serves, for the errors' ``operation``
_OPERATIONS: list[tuple[str, re.Pattern[str], str]] = [
    (m, re.compile(p), op)
    for m, p, op in (
        ("POST", r"^/v1/flows$", "start_flow"),
        ("GET", r"^/v1/flows$", "list_flows"),
        ("GET", r"^/v1/flows/[^/]+$", "describe_flow"),
        ("POST", r"^/v1/flows/[^/]+/stop$", "stop_flow"),
        ("GET", r"^/v1/flows/[^/]+/result$", "wait_for_flow"),
        ("GET", r"^/v1/flows/[^/]+/history$", "get_history"),
        ("GET", r"^/v1/flows/[^/]+/state$", "get_flow_state"),
        ("POST", r"^/v1/flows/[^/]+/attributes$", "read_attributes"),
        ("POST", r"^/v1/flows/[^/]+/rpc$", "invoke_rpc"),
        ("POST", r"^/v1/streams/", "write_stream"),
        ("GET", r"^/v1/streams/.*/next$", "read_stream"),
        ("GET", r"^/v1/streams/", "list_stream_messages"),
        ("GET", r"^/v1/health$", "health_check"),
    )
]


def operation_of(method: str, path: str) -> str:
    """The Client call a request serves (``"describe_flow"``), else ``"METHOD /path"``."""
    for m, pattern, operation in _OPERATIONS:
        if m == method and pattern.search(path):
            return operation
    return f"{method} {path}"


# the Host of requests over a Unix socket (the server serves one application on it)
_UNIX_HOST = "localhost"


def http_base_url(address: str) -> str:
    """``"localhost:8801"`` → ``"http://localhost:8801"``; URLs with a scheme stay as given.

    A ``unix:`` address gives ``http://localhost``: its requests go to the socket.
    """
    if unix_socket_path(address) is not None:
        return f"http://{_UNIX_HOST}"
    address = address.strip().rstrip("/")
    if "://" in address:
        return address
    return f"http://{address}"


def ws_url(address: str, path: str) -> str:
    """Return the WebSocket URL of ``path`` on the server at ``address`` (ws:// or wss://)."""
    base = http_base_url(address)
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    return base + path


def auth_headers(credential: str | None) -> dict[str, str]:
    """Return the ``Authorization`` header for a bearer token (none without a credential)."""
    if not credential:
        return {}
    return {"Authorization": f"Bearer {credential}"}


class HttpAnswer(Protocol):
    """What the SDK reads of an HTTP answer: ``httpx.Response`` or the lean client's."""

    @property
    def status_code(self) -> int: ...

    @property
    def content(self) -> bytes: ...

    @property
    def text(self) -> str: ...

    @property
    def reason_phrase(self) -> str: ...


def error_from_response(
    response: HttpAnswer, flow_id: str | None = None, operation: str = ""
) -> DexError:
    """Build the SDK exception for a non-2xx response (``ApiError`` body, else by HTTP status).

    ``FEATURE_NOT_AVAILABLE`` (the server does not run a feature the request needs, named
    in ``detail``) becomes ``FeatureNotAvailableError``; every other code a
    ``DexServiceError``.
    """
    try:
        api = _api_error_decoder.decode(response.content)
    except (msgspec.DecodeError, msgspec.ValidationError):
        code = _CODE_BY_STATUS.get(response.status_code, ErrorCode.INTERNAL)
        text = response.text.strip()[:500] or response.reason_phrase
        return error_from_code(
            code,
            f"HTTP {response.status_code}: {text}",
            operation=operation,
            flow_id=flow_id,
            retryable=code == ErrorCode.UNAVAILABLE,
        )
    if api.code == ErrorCode.FEATURE_NOT_AVAILABLE:
        return FeatureNotAvailableError(api.detail or api.message)
    return error_from_code(
        api.code,
        api.message,
        operation=operation,
        detail=api.detail,
        flow_id=api.flow_id or flow_id,
        retryable=api.retryable,
        worker_error_type=api.worker_error_type,
        worker_error_detail=api.worker_error_detail,
    )


def transport_error(
    exc: httpx.HTTPError, what: str, operation: str = "", flow_id: str | None = None
) -> DexServiceError:
    """Map an httpx failure (no HTTP answer) to a retryable SDK error."""
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout | httpx.PoolTimeout):
        return error_from_code(
            ErrorCode.REQUEST_TIMEOUT,
            f"{what}: timed out waiting for the server",
            operation=operation,
            flow_id=flow_id,
            retryable=True,
        )
    return error_from_code(
        ErrorCode.UNAVAILABLE,
        f"{what}: cannot reach the Dex server ({type(exc).__name__}: {exc})",
        operation=operation,
        flow_id=flow_id,
        retryable=True,
    )


_RETRY_DELAYS_S = (0.05, 0.25)
_RETRYABLE_TRANSPORT = (
    httpx.ConnectError,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)


# Long polls hold a connection for up to a minute each; they get their own pool, so that
# a few hundred waiting calls never queue the client's other requests behind them.
_LONG_POLL_CONNECTIONS = 1000
_LONG_POLL_LIMITS = httpx.Limits(
    max_connections=_LONG_POLL_CONNECTIONS, max_keepalive_connections=_LONG_POLL_CONNECTIONS
)
# httpx's default pool limits, which the lean client keeps for ordinary requests
_MAX_CONNECTIONS = 100
_MAX_IDLE = 20


_MAX_CACHED_URLS = 1024


class HttpTransport:
    """A small JSON-over-HTTP caller bound to one server.

    Ordinary requests share one connection pool (100 connections, 20 kept idle); long
    polls (``long_poll=True``) use a second pool of up to 1,000 connections, opened on the
    first long poll. A plain ``http://`` server without an HTTP proxy in the environment
    is served by the lean HTTP/1.1 client of ``dex._http1`` (a fraction of httpx's CPU per
    request); ``https://``, proxies, a caller-given ``http`` client (which then serves
    both pools) and ``lean=False`` go through httpx. Not thread-safe: use it from the
    event loop that created it.
    """

    def __init__(
        self,
        address: str,
        *,
        credential: CredentialLike,
        timeout: float | None,
        http: httpx.AsyncClient | None = None,
        lean: bool = True,
    ) -> None:
        # imported here: the Worker package imports this module
        from dex._worker import _inproc

        if _inproc.is_inproc(address):  # an embedded server of this process: its HTTP API
            address = _inproc.endpoint(address).http_address
        self.base_url = http_base_url(address)
        self._unix = unix_socket_path(address)
        self.timeout = timeout
        # The credential is resolved per request (tokens may rotate), also on a given client.
        self._auth = bearer_auth(credential)
        self._http = http or httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout),
            transport=self._unix_transport(),
        )
        if self._auth is not None:
            self._http.auth = self._auth
        self._polls: httpx.AsyncClient | None = http
        # absolute URLs by path, parsed once: httpx parses a relative one twice per request
        # (about 60 us); only for our own clients, whose base URL is ours
        self._urls: dict[str, httpx.URL] | None = {} if http is None else None
        self._credential = credential
        # the lean pools are made at the first request: a process that never sends one
        # (a server, a Worker without large values) does not even import their module
        self._lean_wanted = http is None and lean
        self._lean: tuple[Http1Pool, Http1Pool] | None = None  # (ordinary, long polls)

    def _poll_client(self) -> httpx.AsyncClient:
        if self._polls is None:
            self._polls = httpx.AsyncClient(
                base_url=self.base_url,
                timeout=httpx.Timeout(self.timeout),
                limits=_LONG_POLL_LIMITS,
                auth=self._auth,
                transport=self._unix_transport(_LONG_POLL_LIMITS),
            )
        return self._polls

    def _unix_transport(
        self, limits: httpx.Limits | None = None
    ) -> httpx.AsyncHTTPTransport | None:
        if self._unix is None:
            return None
        if limits is None:
            return httpx.AsyncHTTPTransport(uds=self._unix)
        return httpx.AsyncHTTPTransport(uds=self._unix, limits=limits)

    async def call(
        self,
        method: str,
        path: str,
        response_type: type[T],
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
        flow_id: str | None = None,
        idempotent: bool = False,
        long_poll: bool = False,
    ) -> T:
        """Send one request and decode the 2xx JSON answer as ``response_type``.

        Raises:
            DexServiceError: the subclass for the server's error code.

        """
        response = await self.raw(
            method,
            path,
            body=body,
            params=params,
            timeout=timeout,
            flow_id=flow_id,
            idempotent=idempotent,
            long_poll=long_poll,
        )
        try:
            return msgspec.json.decode(response.content, type=response_type)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise error_from_code(
                ErrorCode.INTERNAL,
                f"{method} {path}: unexpected response from the server: {exc}",
                operation=operation_of(method, path),
                flow_id=flow_id,
            ) from exc

    async def raw(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        timeout: float | None = None,
        flow_id: str | None = None,
        idempotent: bool = False,
        long_poll: bool = False,
    ) -> HttpAnswer:
        """Send one request and return the 2xx response; raise the mapped error otherwise.

        GET requests, and others marked ``idempotent``, are sent again (twice at most)
        when the connection fails before an answer arrives. ``long_poll`` sends it on the
        long-poll pool.
        """
        content = None if body is None else encoder.encode(body)
        headers = {"Content-Type": "application/json"} if content is not None else {}
        send: Callable[[], Awaitable[HttpAnswer]]
        lean = self._lean_pool(long_poll) if self._lean_wanted else None
        if lean is not None:
            if self._auth is not None:
                token = await resolve_token(self._credential)
                if token:
                    headers["Authorization"] = f"Bearer {token}"
            limit = self.timeout if timeout is None else timeout

            def send() -> Awaitable[HttpAnswer]:
                return lean.request(
                    method, path, content=content, params=params, headers=headers, timeout=limit
                )

        else:
            http = self._poll_client() if long_poll else self._http
            url = self._url(path)

            def send() -> Awaitable[HttpAnswer]:
                return http.request(
                    method,
                    url,
                    content=content,
                    params=params,
                    headers=headers,
                    timeout=httpx.USE_CLIENT_DEFAULT if timeout is None else httpx.Timeout(timeout),
                )

        retry_on = _RETRYABLE_TRANSPORT if idempotent or method == "GET" else ()
        for delay in (*_RETRY_DELAYS_S, None):
            try:
                response = await send()
                break
            except retry_on as exc:
                # A pooled keep-alive connection the server just closed fails like this;
                # the request is safe to send again because it is idempotent.
                if delay is None:
                    raise transport_error(
                        exc, f"{method} {path}", operation_of(method, path), flow_id
                    ) from exc
                await asyncio.sleep(delay)
            except httpx.HTTPError as exc:
                raise transport_error(
                    exc, f"{method} {path}", operation_of(method, path), flow_id
                ) from exc
        if response.status_code >= 300:
            raise error_from_response(response, flow_id, operation_of(method, path))
        return response

    def _lean_pool(self, long_poll: bool) -> Http1Pool | None:
        if self._lean is None:
            from dex._http1 import Http1Pool, plain_http_target

            target = plain_http_target(self.base_url)
            if target is None:  # https, or a proxy: httpx serves every request
                self._lean_wanted = False
                return None
            unix = self._unix
            self._lean = (
                Http1Pool(*target, max_connections=_MAX_CONNECTIONS, max_idle=_MAX_IDLE, unix=unix),
                Http1Pool(
                    *target,
                    max_connections=_LONG_POLL_CONNECTIONS,
                    max_idle=_LONG_POLL_CONNECTIONS,
                    unix=unix,
                ),
            )
        return self._lean[1 if long_poll else 0]

    def _url(self, path: str) -> httpx.URL | str:
        urls = self._urls
        if urls is None:
            return path
        found = urls.get(path)
        if found is None:
            if len(urls) >= _MAX_CACHED_URLS:
                urls.clear()
            found = urls[path] = httpx.URL(self.base_url + path)
        return found

    async def aclose(self) -> None:
        """Close both connection pools."""
        for pool in self._lean or ():
            await pool.aclose()
        await self._http.aclose()
        if self._polls is not None and self._polls is not self._http:
            await self._polls.aclose()
