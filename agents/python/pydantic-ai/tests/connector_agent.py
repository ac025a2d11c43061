"""A Pydantic AI agent whose one tool comes from an OpenAPI Connector (``source_tools``).

The test process and the Worker child build the same Flow; only the Worker child has the
service's URL (env ``REFUNDS_BASE_URL``) and its token (env ``REFUNDS_BEARERAUTH``).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from dex_agents import AgentSessionFlow, ConnectorToolSource, EnvSecrets, OpenAPIConnector
from pydantic_ai import Agent

from dex_agents_pydantic_ai import (
    FakeModel,
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    PydanticAIRunner,
    source_tools,
)

FLOW_TYPE = "PydanticAIConnector"
BASE_URL_ENV = "REFUNDS_BASE_URL"

# the refunds API of the core tests' billing service: a POST that honours Idempotency-Key
REFUNDS_DOCUMENT: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "refunds", "version": "1"},
    "security": [{"bearerAuth": []}],
    "components": {"securitySchemes": {"bearerAuth": {"type": "http", "scheme": "bearer"}}},
    "paths": {
        "/refunds": {
            "post": {
                "operationId": "create_refund",
                "summary": "Refund part of an order.",
                "x-idempotency-key": True,
                "requestBody": {
                    "required": True,
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "order_id": {"type": "integer"},
                                    "amount": {"type": "integer"},
                                },
                                "required": ["order_id", "amount"],
                            }
                        }
                    },
                },
            }
        }
    },
}


def script(call: FakeModelCall) -> FakeReply | str:
    if call.call_index == 0 and "refund" in call.user_text:
        body = {"order_id": 7, "amount": 30}
        return FakeReply(
            tool_calls=[FakeToolCall(tool_name="create_refund", arguments={"body": body})]
        )
    results = [part.model_response_str(wrap_if_error=False) for part in call.tool_returns()]
    return "Result: " + "; ".join(results)


async def build_flow() -> AgentSessionFlow:
    connector = OpenAPIConnector.from_document(
        REFUNDS_DOCUMENT,
        base_url=os.environ.get(BASE_URL_ENV, "http://refunds.invalid"),
        credentials=EnvSecrets(prefix="REFUNDS_"),
        timeout=20.0,
    )
    source = ConnectorToolSource(connector, operations=["create_refund"])
    agent = Agent(FakeModel(script), tools=await source_tools(source))
    return AgentSessionFlow(PydanticAIRunner(agent), flow_type=FLOW_TYPE)


if __name__ == "__main__":
    from dex_agents.testing import run_agent_worker

    run_agent_worker([asyncio.run(build_flow())])
