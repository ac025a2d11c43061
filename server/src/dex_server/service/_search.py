"""Flow search and Attribute matches (``search_flows``, ``wait_for_attribute_match``).

A search parses its query against the index keys of every registered spec (so any server
can answer it, whichever Worker registered the type), runs it off the writer on one
snapshot, and pages by offset under a token bound to the query.
"""

from __future__ import annotations

import base64
import hashlib
from collections import defaultdict
from typing import Any

import msgspec
from dex._protocol import ErrorCode, SearchFlowsResponse, SearchFlowWire

from dex_server.engine.query import SYSTEM_FIELDS, FieldType, QueryError, parse_query
from dex_server.engine.schema import (
    StateNames,
    UndeclaredStateError,
    check_attribute_names,
    index_fields,
)
from dex_server.engine.search import IndexRow, MatchOp, attribute_matches, hydrate
from dex_server.service._common import ServiceError
from dex_server.store import FlowRecord, Tx

__all__ = ["MAX_SEARCH_PAGE_SIZE", "match_attribute", "search_fields", "search_flows"]

MAX_SEARCH_PAGE_SIZE = 1000
"""Most Flows one search page returns (``max_search_page_size``)."""

_token_encoder = msgspec.json.Encoder()


class _Token(msgspec.Struct, array_like=True):
    query: str  # digest of the query and its flag: a token serves only the query it came from
    offset: int


def search_fields(tx: Tx) -> dict[str, FieldType]:
    """Every registered index key and its type, over all spec versions (newest wins)."""
    fields: dict[str, FieldType] = {}
    for _version, spec, _at in sorted(tx.specs.all(), key=lambda t: t[2]):
        for key, ftype in index_fields(spec).values():
            fields[key] = ftype
    return fields


def _digest(query: str, include_continued_as_new: bool) -> str:
    return hashlib.sha256(f"{int(include_continued_as_new)}:{query}".encode()).hexdigest()[:16]


def _offset(token: str, digest: str) -> int:
    if not token:
        return 0
    try:
        t = msgspec.json.decode(base64.urlsafe_b64decode(token.encode()), type=_Token)
    except (ValueError, msgspec.DecodeError):
        t = None
    if t is None or t.query != digest or t.offset < 0:
        raise ServiceError(
            ErrorCode.BAD_REQUEST, f"bad page_token {token[:40]!r} (not one this query returned)"
        )
    return t.offset


def search_flows(
    tx: Tx, query: str, page_size: int, token: str, include_continued_as_new: bool
) -> SearchFlowsResponse:
    """One page of the Flows matching ``query``.

    Raises:
        ServiceError: BAD_REQUEST for a query that does not parse or type-check (the
            message names the position and the token), a page size outside 1..1000, or a
            page token that did not come from this query.

    """
    if not 1 <= page_size <= MAX_SEARCH_PAGE_SIZE:
        raise ServiceError(
            ErrorCode.BAD_REQUEST,
            f"page_size must be 1..{MAX_SEARCH_PAGE_SIZE} (max_search_page_size), got {page_size}",
        )
    digest = _digest(query, include_continued_as_new)
    offset = _offset(token, digest)
    try:
        q = parse_query(query, search_fields(tx))
    except QueryError as exc:
        raise ServiceError(
            ErrorCode.BAD_REQUEST, str(exc), detail=f"position={exc.position} token={exc.token!r}"
        ) from None
    runs = tx.search.search(
        q, include_continued_as_new=include_continued_as_new, limit=page_size + 1, offset=offset
    )
    page = runs[:page_size]
    nxt = None
    if len(runs) > page_size:
        raw = _token_encoder.encode(_Token(digest, offset + page_size))
        nxt = base64.urlsafe_b64encode(raw).decode()
    return SearchFlowsResponse(flows=_hydrated(tx, page), next_page_token=nxt)


def _hydrated(tx: Tx, page: list[FlowRecord]) -> list[SearchFlowWire]:
    rows: dict[str, dict[str, tuple[str, list[IndexRow]]]] = defaultdict(dict)
    for r in tx.search.of_runs([f.run_id for f in page]):
        rows[r.run_id].setdefault(r.key, (r.type, []))[1].append(r.row)
    out = []
    for f in page:
        # system fields kept as rows (DexParentFlowID) are not Attributes
        attrs: dict[str, Any] = {
            key: hydrate(FieldType(t), rs)
            for key, (t, rs) in rows.get(f.run_id, {}).items()
            if key not in SYSTEM_FIELDS
        }
        out.append(
            SearchFlowWire(
                flow_id=f.flow_id,
                run_id=f.run_id,
                flow_type=f.flow_type,
                status=f.status,
                started_at=f.started_at,
                closed_at=f.closed_at,
                indexed_attributes=attrs,
            )
        )
    return out


def match_attribute(
    tx: Tx, flow_id: str, name: str, op: MatchOp, operand: Any
) -> tuple[bool, bytes | None]:
    """Whether the latest run's committed Attribute ``name`` matches, and its JSON value.

    Raises:
        ServiceError: FLOW_NOT_ACTIVE for no such Flow, or once the run closed without a
            match; BAD_REQUEST for an undeclared Attribute or a value kept as a blob.

    """
    flow = tx.flows.latest(flow_id)
    if flow is None:
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE,
            f"Flow {flow_id!r} is not active or not found",
            flow_id=flow_id,
        )
    spec = tx.specs.get(flow.flow_type, flow.spec_version)
    if spec is not None:
        try:
            check_attribute_names(StateNames.of(spec), [name], "wait_for_attribute_match")
        except UndeclaredStateError as exc:
            raise ServiceError(ErrorCode.BAD_REQUEST, str(exc), flow_id=flow_id) from None
    stored = tx.state.get(flow.run_id, name)
    if stored is not None and stored.blob is not None:
        raise ServiceError(
            ErrorCode.BAD_REQUEST,
            f"Attribute {name!r} is stored as a blob; wait_for_attribute_match compares"
            " scalar values only",
            flow_id=flow_id,
        )
    raw = bytes(stored.value) if stored is not None and stored.value is not None else None
    value = msgspec.json.decode(raw) if raw is not None else None
    if attribute_matches(op, operand, value):
        return True, raw
    if flow.status != "running":
        raise ServiceError(
            ErrorCode.FLOW_NOT_ACTIVE,
            f"Flow {flow_id!r} closed before Attribute {name!r} matched",
            flow_id=flow_id,
        )
    return False, raw
