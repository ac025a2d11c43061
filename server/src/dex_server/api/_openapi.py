"""OpenAPI 3.1 document generated from the wire structs."""

from __future__ import annotations

import functools
from typing import Any

import msgspec
from dex._protocol import (
    ApiError,
    AttributeValuesWire,
    FlowInfoWire,
    FlowListResponse,
    FlowResultWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    InvokeRpcRequest,
    InvokeRpcResponse,
    ReadAttributesRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
)

_TYPES: list[Any] = [
    ApiError,
    AttributeValuesWire,
    FlowInfoWire,
    FlowListResponse,
    FlowResultWire,
    FlowStateWire,
    HealthResponse,
    HistoryPage,
    InvokeRpcRequest,
    InvokeRpcResponse,
    ReadAttributesRequest,
    StartFlowRequest,
    StartFlowResponse,
    StopFlowRequest,
    StreamListResponse,
    StreamReadResponse,
    StreamWriteRequest,
]

# (method, path, request, response, summary)
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
    ("get", "/v1/flows/{flow_id}/result", None, "FlowResultWire", "Long-poll the result"),
    ("post", "/v1/flows/{flow_id}/rpc", "InvokeRpcRequest", "InvokeRpcResponse", "Invoke an RPC"),
    ("post", "/v1/flows/{flow_id}/stop", "StopFlowRequest", None, "Stop a running Flow"),
    ("get", "/v1/flows/{flow_id}/history", None, "HistoryPage", "Page through history"),
    (
        "post",
        "/v1/streams/{flow_type}/{stream}/{flow_id}",
        "StreamWriteRequest",
        None,
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
    ("get", "/v1/health", None, "HealthResponse", "Health check (no auth)"),
]


def _ref(name: str) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": {"$ref": f"#/components/schemas/{name}"}}}}


@functools.cache
def openapi_document() -> bytes:
    """Return the OpenAPI document as JSON bytes (built once)."""
    _, components = msgspec.json.schema_components(
        _TYPES, ref_template="#/components/schemas/{name}"
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, req, resp, summary in _ROUTES:
        op: dict[str, Any] = {
            "summary": summary,
            "responses": {
                "200": {"description": "OK", **(_ref(resp) if resp else {})},
                "default": {"description": "Error", **_ref("ApiError")},
            },
        }
        if req:
            op["requestBody"] = {"required": True, **_ref(req)}
        params = [p.strip("{}") for p in path.split("/") if p.startswith("{")]
        if params:
            op["parameters"] = [
                {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                for p in params
            ]
        paths.setdefault(path, {})[method] = op
    paths["/v1/blobs/{sha256}"] = {
        "get": {
            "summary": "Blob bytes",
            "responses": {
                "200": {"description": "raw bytes"},
                "404": {"description": "unknown blob"},
            },
        }
    }
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
