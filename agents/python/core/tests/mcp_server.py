"""A real MCP server for the MCPToolSource tests, written with the ``mcp`` SDK.

Run it as ``python -m tests.mcp_server`` (stdio) or ``python -m tests.mcp_server http PORT``
(streamable HTTP). ``MCP_TEST_STATE_DIR`` is where it logs calls (an ``InvocationLog``,
kind ``mcp:<tool>``, key the ``dex/idempotency_key`` of the request) and keeps its
``FileGate`` s; ``MCP_TEST_GATES`` names the tools that pass the gate ``mcp-<tool>``
before they act.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

from dex_agents import IDEMPOTENCY_KEY_META
from dex_agents.testing import FileGate, InvocationLog
from mcp.server.mcpserver import Context, ElicitationResult, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Elicit, Resolve
from mcp_types import ToolAnnotations
from pydantic import BaseModel

STATE_DIR = Path(os.environ.get("MCP_TEST_STATE_DIR", "."))
GATED = {name for name in os.environ.get("MCP_TEST_GATES", "").split(",") if name}
LOG = InvocationLog(STATE_DIR / "mcp_calls.log")

app = MCPServer("orders")


def _key(ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    return str(meta.get(IDEMPOTENCY_KEY_META, ""))


async def _enter(tool: str, ctx: Context) -> str:
    key = _key(ctx)
    LOG.record(f"mcp:{tool}", key)
    if tool in GATED:
        await FileGate(STATE_DIR, f"mcp-{tool}").pass_through()
    return key


@app.tool(annotations=ToolAnnotations(read_only_hint=True))
async def lookup(order_id: str, ctx: Context) -> str:
    """Look up an order's status."""
    await _enter("lookup", ctx)
    return f"order {order_id} has shipped"


@app.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
async def set_status(order_id: str, status: str, ctx: Context) -> str:
    """Set an order's status; a repeat with the same idempotency key changes nothing."""
    key = await _enter("set_status", ctx)
    applied = STATE_DIR / "applied.txt"
    seen = applied.read_text().splitlines() if applied.exists() else []
    if key in seen:
        return f"order {order_id} already {status} (key {key})"
    with applied.open("a") as out:
        out.write(key + "\n")
    return f"order {order_id} set to {status} (key {key})"


@app.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False))
async def refund(order_id: str, amount: int, ctx: Context) -> str:
    """Refund an amount on an order (not idempotent)."""
    await _enter("refund", ctx)
    return f"refunded {amount} on order {order_id}"


@app.tool()
async def broken(ctx: Context) -> str:
    """Always fails with a tool error the model should see."""
    raise ToolError("the warehouse is closed")


class Address(BaseModel):
    street: str
    city: str


def ask_address(order_id: str) -> Elicit[Address]:
    return Elicit(f"Where should order {order_id} go?", Address)


@app.tool(annotations=ToolAnnotations(read_only_hint=False, idempotent_hint=True))
async def change_address(
    order_id: str,
    address: Annotated[ElicitationResult[Address], Resolve(ask_address)],
    ctx: Context,
) -> str:
    """Change where an order goes; asks the user for the new address."""
    await _enter("change_address", ctx)
    if address.action != "accept":
        return f"order {order_id}: the user chose not to give an address ({address.action})"
    return f"order {order_id} goes to {address.data.street}, {address.data.city}"


class Reason(BaseModel):
    reason: str


def ask_reason(order_id: str) -> Elicit[Reason]:
    return Elicit(f"Why cancel order {order_id}?", Reason)


@app.tool()
async def cancel_order(
    order_id: str, reason: Annotated[Reason, Resolve(ask_reason)], ctx: Context
) -> str:
    """Cancel an order (not idempotent); asks the user why."""
    await _enter("cancel_order", ctx)
    return f"order {order_id} cancelled: {reason.reason}"


if __name__ == "__main__":
    if sys.argv[1:2] == ["http"]:
        app.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        app.run()
