"""OpenAPI 3.1 document generated from the wire structs."""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from dex._protocol import (
    ApiError,
    AttributeMatchResponse,
    AttributeValuesWire,
    FlowConfigWire,
    FlowInfoWire,
    FlowListResponse,
    FlowResultWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    InvokeRpcRequest,
    InvokeRpcResponse,
    ReadAttributesRequest,
    SearchFlowsResponse,
    SkipTimerRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
    TimeTravelRequest,
    TimeTravelResponse,
)

_TYPES: list[Any] = [
    ApiError,
    AttributeValuesWire,
    FlowConfigWire,
    FlowInfoWire,
    FlowListResponse,
    FlowResultWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    InvokeRpcRequest,
    InvokeRpcResponse,
    ReadAttributesRequest,
    SkipTimerRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
    TimeTravelRequest,
    TimeTravelResponse,
    SearchFlowsResponse,
    AttributeMatchResponse,
]

_ID = {"type": "string", "minLength": 1}
_TOKEN = {"type": "string", "pattern": "^[0-9]{0,18}$"}
# a finite number; below 0 counts as 0 and above 60 as 60
_TIMEOUT = {"type": "number", "default": 60}


def _page_size(default: int) -> dict[str, Any]:
    # above 1000 counts as 1000
    return {"type": "integer", "minimum": 1, "default": default}


_FLOW_STATUSES = ["running", "completed", "failed", "canceled", "terminated", "continued_as_new"]
_UUID7 = "[0-9a-f]{12}7[0-9a-f]{3}[89ab][0-9a-f]{15}"

_AFTER = (
    "resume after this event ID (a first connection; a Last-Event-ID header wins);"
    " default: from the oldest"
)
_LIFETIME = (
    "how long the feed stays open, in seconds (0 to 60); then it ends without an end"
    " event and the client reconnects with Last-Event-ID, as EventSource does by itself"
)
_SSE = {
    ("get", "/v1/streams/{flow_type}/{stream}/{flow_id}/events"): (
        "Each Stream message as an event `message` (id: its resume token; data: a"
        " StreamMessageWire as JSON), in order, as it is written. Send the last id seen as"
        " the Last-Event-ID header to resume; idle feeds get a comment line every"
        " sse_heartbeat_s. When the Flow closes, the feed sends what is left, then an event"
        " `end` (data: flow_id, run_id, status) and ends. Over max_sse_connections open"
        " feeds: 503 UNAVAILABLE naming the limit."
    ),
    ("get", "/v1/flows/{flow_id}/history/events"): (
        "Each history event of the run as an event `history` (id: its event_id; data: a"
        " HistoryEventWire as JSON), oldest first, then each new one as it commits."
        " Resumes, heartbeats, ends and is limited like the Stream feed."
    ),
}

# query parameters of each (method, path): name -> (schema, description)
_QUERY: dict[tuple[str, str], dict[str, tuple[dict[str, Any], str]]] = {
    ("get", "/v1/flows"): {
        "page_size": (_page_size(100), "Flows per page (above 1000: 1000)"),
        "page_token": (
            {"type": "string", "pattern": f"^({_UUID7}|[A-Za-z0-9_=-]+)?$"},
            "next_page_token of the previous page (empty: the first page)",
        ),
        "status": (
            {"type": "string", "enum": ["", *_FLOW_STATUSES]},
            "only Flows in this status (empty: any)",
        ),
        "flow_type": ({"type": "string"}, "only Flows of this type (empty: any)"),
        "query": (
            {"type": "string"},
            "a search query over indexed Attributes and system fields (present, even"
            " empty: the answer is a SearchFlowsResponse, page_size 1..1000, and"
            " page_token is the search page's next_page_token)",
        ),
        "include_continued_as_new": (
            {"type": "string"},
            "with query: also runs that continued as new (default false)",
        ),
    },
    ("get", "/v1/flows/{flow_id}/attributes/match"): {
        "name": ({"type": "string"}, "the Attribute (or map instance 'map/key') to watch"),
        "op": (
            {"type": "integer", "minimum": 1, "maximum": 6},
            "1 EQUAL, 2 NOT_EQUAL, 3 GREATER, 4 GREATER_OR_EQUAL, 5 LESS, 6 LESS_OR_EQUAL",
        ),
        "operand": ({"type": "string"}, "the operand as JSON (default null)"),
        "timeout_s": (_TIMEOUT, "how long to wait for a match, in seconds (0 to 60)"),
    },
    ("get", "/v1/flows/{flow_id}/result"): {
        "timeout_s": (_TIMEOUT, "how long to wait for the result, in seconds (0 to 60)"),
    },
    ("get", "/v1/flows/{flow_id}/history"): {
        "page_size": (_page_size(200), "events per page (above 1000: 1000)"),
        "run_id": ({"type": "string"}, "a run of the Flow ID (default: the latest)"),
        "page_token": (_TOKEN, "next_page_token of the previous page"),
    },
    ("get", "/v1/streams/{flow_type}/{stream}/{flow_id}/next"): {
        "resume_token": (_TOKEN, "resume_token of the last message read (default: oldest)"),
        "timeout_s": (_TIMEOUT, "how long to wait for a message, in seconds (0 to 60)"),
        "max_messages": (
            _page_size(1),
            "also return up to this many messages in `messages` (above 100: 100)",
        ),
    },
    ("get", "/v1/streams/{flow_type}/{stream}/{flow_id}/events"): {
        "after": (_TOKEN, _AFTER),
        "timeout_s": (_TIMEOUT, _LIFETIME),
    },
    ("get", "/v1/flows/{flow_id}/history/events"): {
        "run_id": ({"type": "string"}, "a run of the Flow ID (default: the latest)"),
        "after": (_TOKEN, _AFTER),
        "timeout_s": (_TIMEOUT, _LIFETIME),
    },
    ("get", "/v1/streams/{flow_type}/{stream}/{flow_id}"): {
        "before": (_TOKEN, "before_page_token of the previous page"),
        "page_size": (_page_size(100), "messages per page (above 1000: 1000)"),
    },
    ("get", "/v1/flows/{flow_id}/steps/{step_type}/{number}/completion"): {
        "timeout_s": (_TIMEOUT, "how long to wait for the execution to end (0 to 60)"),
    },
}

_PATH_PARAMS: dict[str, tuple[dict[str, Any], str]] = {
    "flow_id": (_ID, "Flow ID (percent-encode every reserved character, '.' included)"),
    "flow_type": (_ID, "Flow type"),
    "stream": (_ID, "Stream name"),
    "sha256": ({"type": "string", "pattern": "^[0-9a-f]{64}$"}, "the blob's sha256 (hex)"),
    "step_type": (_ID, "Step type"),
    "number": (
        {"type": "string", "pattern": "^[0-9]{1,18}$"},
        "which execution of the Step type (from 1)",
    ),
}

_EMPTY = {"type": "object", "properties": {}}

# (method, path, request, response, summary); response "{}" is an empty JSON object
_ROUTES: list[tuple[str, str, str | None, str | None, str]] = [
    ("post", "/v1/flows", "StartFlowRequest", "StartFlowResponse", "Start a Flow run"),
    ("get", "/v1/flows", None, "FlowListResponse", "List Flows, newest first"),
    ("get", "/v1/flows/{flow_id}", None, "FlowInfoWire", "Describe the latest run"),
    ("get", "/v1/flows/{flow_id}/state", None, "FlowStateWire", "Active Steps and state names"),
    (
        "post",
        "/v1/flows/{flow_id}/attributes",
        "ReadAttributesRequest",
        "AttributeValuesWire",
        "Read committed Attribute values (no Worker needed)",
    ),
    (
        "get",
        "/v1/flows/{flow_id}/attributes/match",
        None,
        "AttributeMatchResponse",
        "Long-poll until a committed Attribute matches (408 LONG_POLL_TIMEOUT: call again)",
    ),
    ("get", "/v1/flows/{flow_id}/result", None, "FlowResultWire", "Long-poll the result"),
    ("post", "/v1/flows/{flow_id}/rpc", "InvokeRpcRequest", "InvokeRpcResponse", "Invoke an RPC"),
    ("post", "/v1/flows/{flow_id}/stop", "StopFlowRequest", "{}", "Stop a running Flow"),
    ("get", "/v1/flows/{flow_id}/history", None, "HistoryPage", "Page through history"),
    (
        "post",
        "/v1/flows/{flow_id}/time-travel",
        "TimeTravelRequest",
        "TimeTravelResponse",
        "Fork the latest run into a new run from a point in its history",
    ),
    (
        "post",
        "/v1/flows/{flow_id}/continue-as-new",
        None,
        "{}",
        "Continue a running Flow as a new run at its next quiescent commit",
    ),
    (
        "post",
        "/v1/streams/{flow_type}/{stream}/{flow_id}",
        "StreamWriteRequest",
        "{}",
        "Write a Stream message",
    ),
    (
        "get",
        "/v1/streams/{flow_type}/{stream}/{flow_id}/next",
        None,
        "StreamReadResponse",
        "Long-poll the next Stream message",
    ),
    (
        "get",
        "/v1/streams/{flow_type}/{stream}/{flow_id}",
        None,
        "StreamListResponse",
        "List Stream messages, newest first",
    ),
    (
        "get",
        "/v1/streams/{flow_type}/{stream}/{flow_id}/events",
        None,
        None,
        "Follow a Stream as Server-Sent Events",
    ),
    (
        "get",
        "/v1/flows/{flow_id}/history/events",
        None,
        None,
        "Follow a run's history as Server-Sent Events",
    ),
    (
        "post",
        "/v1/flows/{flow_id}/config",
        "FlowConfigWire",
        "FlowInfoWire",
        "Merge fields into a running Flow's FlowConfig",
    ),
    (
        "get",
        "/v1/flows/{flow_id}/steps/{step_type}/{number}/completion",
        None,
        "{}",
        "Long-poll until one Step execution of the latest run has ended",
    ),
    (
        "post",
        "/v1/flows/{flow_id}/steps/{step_type}/{number}/skip-timer",
        "SkipTimerRequest",
        "{}",
        "Fire one pending timer of a waiting Step execution now",
    ),
    ("get", "/v1/blobs/{sha256}", None, None, "Blob bytes (offloaded values)"),
    ("get", "/v1/health", None, "HealthResponse", "Health check (no auth)"),
    ("get", "/openapi.json", None, None, "This document"),
]

# routes answered without a token
PUBLIC = {("get", "/v1/health")}


def _ref(name: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


def _error(description: str) -> dict[str, Any]:
    return {"description": description, **_ref("ApiError")}


def _ok(method: str, path: str, resp: str | None) -> dict[str, Any]:
    if resp == "{}":
        return {"description": "OK", "content": {"application/json": {"schema": _EMPTY}}}
    if resp is not None:
        return {"description": "OK", **_ref(resp)}
    if (method, path) in _SSE:
        return {
            "description": _SSE[(method, path)],
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        }
    if path == "/v1/blobs/{sha256}":
        media = "application/octet-stream"
        return {"description": "raw bytes", "content": {media: {"schema": {}}}}
    return {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}


# operations whose request may ask for an optional feature (StartFlowRequest.requires, a
# search query)
_NEEDS_FEATURES = {("post", "/v1/flows"), ("get", "/v1/flows")}


def _operation_id(method: str, path: str) -> str:
    words = [w.strip("{}").replace(".", "_") for w in path.split("/") if w and w != "v1"]
    return "_".join([method, *words])


def _operation(
    method: str, path: str, req: str | None, resp: str | None, summary: str
) -> dict[str, Any]:
    params = [p.strip("{}") for p in path.split("/") if p.startswith("{")]
    responses: dict[str, Any] = {"200": _ok(method, path, resp)}
    if params or req or (method, path) in _QUERY:
        responses["400"] = _error("Bad request (BAD_REQUEST and other 4xx codes)")
    if (method, path) not in PUBLIC:
        responses["401"] = _error("Missing or wrong bearer token (UNAUTHENTICATED)")
    if params:
        responses["404"] = _error("No such Flow, Flow type, Stream or blob")
    responses["405"] = _error("Method not allowed on this path (METHOD_NOT_ALLOWED)")
    if req or params or (method, path) in _QUERY:
        responses["413"] = _error("A limit was exceeded (LIMIT_EXCEEDED names it)")
    responses["431"] = _error("Request head over max_header_bytes or max_header_count")
    if (method, path) in _SSE:
        responses["503"] = _error("Too many feeds open (UNAVAILABLE names max_sse_connections)")
    if (method, path) in _NEEDS_FEATURES:
        responses["422"] = _error(
            "Needs a feature this server does not run (FEATURE_NOT_AVAILABLE)"
        )
    responses["default"] = _error("Error (ApiError.code says which)")
    op: dict[str, Any] = {
        "summary": summary,
        "operationId": _operation_id(method, path),
        "responses": responses,
    }
    if req:
        op["requestBody"] = {"required": True, **_ref(req)}
    parameters: list[dict[str, Any]] = []
    for p in params:
        schema, description = _PATH_PARAMS[p]
        parameters.append(
            {
                "name": p,
                "in": "path",
                "required": True,
                "description": description,
                "schema": schema,
            }
        )
    for name, (schema, description) in _QUERY.get((method, path), {}).items():
        parameters.append(
            {
                "name": name,
                "in": "query",
                "required": False,
                "description": description,
                "schema": schema,
            }
        )
    if parameters:
        op["parameters"] = parameters
    if (method, path) in PUBLIC:
        op["security"] = []
    if (method, path) == ("post", "/v1/flows"):
        responses["200"]["links"] = _START_LINKS
    return op


# what a started Flow can be asked next (the Flow ID is the start request's)
_START_LINKS = {
    ("describe" if path.endswith("}") else path.rsplit("/", 1)[-1]): {
        "operationId": _operation_id(method, path),
        "parameters": {"flow_id": "$request.body#/flow_id"},
    }
    for method, path in [
        ("get", "/v1/flows/{flow_id}"),
        ("get", "/v1/flows/{flow_id}/state"),
        ("get", "/v1/flows/{flow_id}/result"),
        ("get", "/v1/flows/{flow_id}/history"),
        ("post", "/v1/flows/{flow_id}/stop"),
    ]
}


def routes() -> list[tuple[str, str]]:
    """Every documented ``(method, path)``."""
    return [(m, p) for m, p, *_ in _ROUTES]


def query_parameters() -> dict[tuple[str, str], list[str]]:
    """The query parameters each ``(method, path)`` documents."""
    return {k: list(v) for k, v in _QUERY.items()}


@functools.cache
def openapi_document() -> bytes:
    """Return the OpenAPI document as JSON bytes (built once)."""
    _, components = msgspec.json.schema_components(
        _TYPES, ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, req, resp, summary in _ROUTES:
        paths.setdefault(path, {})[method] = _operation(method, path, req, resp, summary)
    doc = {
        "openapi": "3.1.0",
        "info": {"title": "Dex server API", "version": "0.1.0"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }
    return msgspec.json.encode(doc)
