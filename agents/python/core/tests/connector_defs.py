"""The billing Connector's OpenAPI document and the agent Flow that uses it.

The test process and the Worker child build the same Flow. Only the Worker child has the
secret (env ``BILLING_BEARERAUTH``) and the service URL (env ``BILLING_BASE_URL``): the
test process never needs them to start sessions.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ConnectorToolSource,
    EnvSecrets,
    OpenAPIConnector,
    SourceTool,
    ToolSource,
    current_tool_execution,
)
from dex_agents.testing import (
    InvocationLog,
    ModelCall,
    ScriptedModel,
    ScriptedResponse,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
)

BASE_URL_ENV = "BILLING_BASE_URL"
STATE_DIR_ENV = "CONNECTOR_TEST_STATE_DIR"
OFFERED = ["get_order", "create_refund", "create_charge", "echo_auth", "flaky_read"]

BILLING_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "billing", "version": "1"},
    "servers": [{"url": "http://billing.invalid"}],
    "security": [{"bearerAuth": []}],
    "components": {
        "securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}},
        "schemas": {
            "Refund": {
                "type": "object",
                "properties": {"order_id": {"type": "integer"}, "amount": {"type": "integer"}},
                "required": ["order_id", "amount"],
            }
        },
    },
    "paths": {
        "/orders/{order_id}": {
            "get": {
                "operationId": "get_order",
                "summary": "Look up an order.",
                "parameters": [
                    {
                        "name": "order_id",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "integer"},
                    }
                ],
            }
        },
        "/refunds": {
            "post": {
                "operationId": "create_refund",
                "summary": "Refund part of an order.",
                "x-idempotency-key": True,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {"schema": {"$ref": "#/components/schemas/Refund"}}
                    },
                },
            }
        },
        "/charges": {
            "post": {
                "operationId": "create_charge",
                "summary": "Charge a card.",
                "requestBody": {
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
            }
        },
        "/echo": {"post": {"operationId": "echo_auth", "summary": "Echo.", "x-dex-effect": "read"}},
        "/flaky": {"get": {"operationId": "flaky_read", "summary": "Always 503."}},
        "/admin": {"delete": {"operationId": "wipe_everything", "summary": "Not offered."}},
    },
}


def billing_source() -> ConnectorToolSource:
    """The billing Connector with the offered operations (``wipe_everything`` is not)."""
    connector = OpenAPIConnector.from_document(
        BILLING_DOCUMENT,
        base_url=os.environ.get(BASE_URL_ENV, "http://billing.invalid"),
        credentials=EnvSecrets(prefix="BILLING_"),
        timeout=20.0,
    )
    return ConnectorToolSource(connector, operations=OFFERED)


def source_functions(source: ToolSource, tools: list[SourceTool]) -> dict[str, Callable[..., Any]]:
    """Scripted-runner tool functions that run each source tool through the source."""

    def bind(tool: SourceTool) -> Callable[..., Any]:
        async def run(**arguments: Any) -> str:
            call = current_tool_execution()
            assert call is not None, "source tools run only inside a tool Step"
            return await source.call_tool(tool, arguments, call)

        return run

    return {tool.name: bind(tool) for tool in tools}


def _route(call: ModelCall, effects: Mapping[str, Any]) -> ScriptedResponse:
    text = call.user_text.lower()
    arguments: dict[str, Any]
    if "refund" in text:
        name, arguments = "create_refund", {"body": {"order_id": 7, "amount": 30}}
    elif "charge" in text:
        name, arguments = "create_charge", {"body": {"order_id": 7, "amount": 5}}
    elif "echo" in text:
        name, arguments = "echo_auth", {}
    elif "flaky" in text:
        name, arguments = "flaky_read", {}
    elif "missing" in text:
        name, arguments = "get_order", {"order_id": 0}
    elif "order" in text:
        name, arguments = "get_order", {"order_id": 7}
    else:
        return ScriptedText(text=f"echo: {call.user_text}")
    return ScriptedToolCalls(
        calls=[ScriptedToolCall(tool_name=name, arguments=arguments, effect=effects[name])]
    )


def _summarize(call: ModelCall) -> ScriptedResponse:
    lines = [f"{r.tool_name}: {r.status}: {r.content}" for r in call.tool_results]
    return ScriptedText(text="\n".join(lines))


def build_flow(state_dir: Path) -> AgentSessionFlow:
    """The billing agent: the model routes on keywords, tools come from the Connector."""
    source = billing_source()
    tools = list(source.tools)
    effects = {tool.name: tool.effect for tool in tools}

    def step(call: ModelCall) -> ScriptedResponse:
        return _route(call, effects) if call.call_index == 0 else _summarize(call)

    runner = ScriptedRunner(
        ScriptedModel(default=step),
        source_functions(source, tools),
        log=InvocationLog(state_dir / "calls.log"),
    )
    return AgentSessionFlow(runner, flow_type="AgentBilling", options=AgentSessionOptions())


def flows_from_env() -> list[AgentSessionFlow]:
    return [build_flow(Path(os.environ[STATE_DIR_ENV]))]
