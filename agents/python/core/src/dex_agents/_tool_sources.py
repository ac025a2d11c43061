"""Tool sources: tools that come from outside the agent's code (MCP servers, Connectors).

A tool source lists tool definitions, each with a JSON Schema for its arguments and the
effect class its origin declares, and runs one call at a time. The adapters turn a
source's tools into their framework's native tools, so the framework offers them to the
model, the session defers each call to its own tool Step, and the Step runs it through the
source. The effect a source declares is framework metadata: an explicit
``AgentSessionOptions.tool_policies`` entry always wins over it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from dex_agents._enums import ToolEffect
from dex_agents._runner import DeferredToolExecution


class SourceTool(msgspec.Struct, frozen=True):
    """One tool a source offers.

    Attributes:
        name: the name the model calls it by; unique within the agent.
        description: what the model reads about it.
        input_schema: JSON Schema of the arguments (an ``object`` schema).
        effect: the effect class the source declares, or None when it declares none (the
            session's ``default_tool_effect`` then applies).

    """

    name: str
    description: str
    input_schema: dict[str, Any]
    effect: ToolEffect | None = None


@runtime_checkable
class ToolSource(Protocol):
    """What ``MCPToolSource``, ``ConnectorToolSource`` and custom sources implement.

    ``list_tools`` runs when an agent is built, on the Worker; ``call_tool`` runs inside
    the call's tool Step, possibly concurrently with itself and again after a crash. A
    source must not assume a connection survives between Steps or across a Worker restart.
    """

    async def list_tools(self) -> Sequence[SourceTool]:
        """Return the tools this source offers, in a stable order."""
        ...

    async def call_tool(
        self, tool: SourceTool, arguments: Mapping[str, Any], call: DeferredToolExecution
    ) -> str:
        """Run one call and return its output as the model should see it.

        Raises:
            ToolExecutionError: a failure the model should see (not retried).
            Exception: any other error is a Step failure and follows the effect's rules.

        """
        ...
