"""The Client's Flow search and Attribute match calls (behind ``AsyncClient``)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from dex._client._defs import quote_segment
from dex._client._types import FlowStatus, SearchFlowEntry, SearchFlowsPage
from dex._client._wait_options import AttributeMatch, WaitForAttributeOptions
from dex._protocol import AttributeMatchResponse, SearchFlowsResponse
from dex._state._common import instance_name
from dex.errors import ErrorSubStatus, LongPollTimeoutError, RequestTimeoutError, StatusCode

if TYPE_CHECKING:
    from dex._registry import Registry
    from dex._transport import HttpTransport

_LONG_POLL_CAP_S = 60.0
_LONG_POLL_SLACK_S = 10.0


def _time(ts: float | None) -> datetime | None:
    return None if ts is None else datetime.fromtimestamp(ts, tz=UTC)


async def search_page(
    http: HttpTransport,
    query: str,
    page_size: int,
    next_page_token: str,
    include_continued_as_new: bool,
) -> SearchFlowsPage:
    """Send one search request and build its page."""
    params = {"query": query, "page_size": str(page_size)}
    if next_page_token:
        params["page_token"] = next_page_token
    if include_continued_as_new:
        params["include_continued_as_new"] = "true"
    wire = await http.call("GET", "/v1/flows", SearchFlowsResponse, params=params)
    flows = []
    for f in wire.flows:
        started = _time(f.started_at)
        assert started is not None
        flows.append(
            SearchFlowEntry(
                f.flow_id,
                f.run_id,
                f.flow_type,
                FlowStatus(f.status),
                started,
                _time(f.closed_at),
                dict(f.indexed_attributes),
            )
        )
    return SearchFlowsPage(flows=tuple(flows), next_page_token=wire.next_page_token or "")


def _target(
    attribute: Any, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[str, Any, AttributeMatch[Any], WaitForAttributeOptions]:
    """(physical name, declaration, match, options) of a ``wait_for_attribute_match`` call."""
    rest = list(args)

    def take(kw: str) -> object:
        if kw in kwargs:
            return kwargs.pop(kw)
        return rest.pop(0) if rest else None

    kind = getattr(attribute, "kind", None)
    if kind not in ("attribute", "attribute_map"):
        raise TypeError(f"expected an Attribute or AttributeMap, got {attribute!r}")
    if getattr(attribute, "hard_delete_on_null", False):
        raise TypeError(f"hard-delete Attribute {attribute.name!r} cannot be waited on")
    name: str = attribute.name
    if kind == "attribute_map":
        key = take("key")
        if not isinstance(key, str) or not key:
            raise TypeError(f"AttributeMap {name!r} needs an instance key (a non-empty str)")
        name = instance_name(name, key)
    match = take("match")
    if not isinstance(match, AttributeMatch):
        raise TypeError(f"expected an AttributeMatch, got {match!r}")
    options = (
        kwargs.pop("options", None) if "options" in kwargs else (rest.pop(0) if rest else None)
    )
    if options is None:
        options = WaitForAttributeOptions()
    if not isinstance(options, WaitForAttributeOptions):
        raise TypeError(f"expected WaitForAttributeOptions, got {options!r}")
    if rest or kwargs:
        raise TypeError(f"unexpected arguments: {rest or list(kwargs)}")
    return name, attribute, match, options


async def wait_match(
    http: HttpTransport,
    registry: Registry,
    flow_id: str,
    attribute: Any,
    args: tuple[object, ...],
    kwargs: dict[str, object],
) -> Any:
    """Long-poll (again and again) until the Attribute matches; return its decoded value."""
    name, decl, match, options = _target(attribute, args, kwargs)
    total = options.request_timeout.total_seconds()
    per_poll = options.internal_handler_timeout.total_seconds() or _LONG_POLL_CAP_S
    if total < 0 or per_poll < 0:
        raise ValueError("WaitForAttributeOptions timeouts must be non-negative")
    deadline = time.monotonic() + total if total > 0 else None
    operand = msgspec.json.encode(match._operand).decode()
    while True:
        wait_s = min(per_poll, _LONG_POLL_CAP_S)
        if deadline is not None:
            wait_s = max(0.0, min(wait_s, deadline - time.monotonic()))
        params = {
            "name": name,
            "op": str(int(match._operator)),
            "operand": operand,
            "timeout_s": f"{wait_s:.3f}",
        }
        try:
            wire = await http.call(
                "GET",
                f"/v1/flows/{quote_segment(flow_id)}/attributes/match",
                AttributeMatchResponse,
                params=params,
                timeout=wait_s + _LONG_POLL_SLACK_S,
                long_poll=True,
                flow_id=flow_id,
            )
        except LongPollTimeoutError:
            if deadline is not None and time.monotonic() >= deadline:
                raise RequestTimeoutError(
                    StatusCode.DEADLINE_EXCEEDED,
                    ErrorSubStatus.REQUEST_TIMEOUT,
                    f"Attribute {name!r} did not match within {timedelta(seconds=total)}",
                    "wait_for_attribute_match",
                    flow_id,
                ) from None
            continue
        if wire.value is None:
            return None
        return registry.codec_for(decl.value_type).decode(bytes(wire.value))
