"""``MCPToolSource``: the tools of an MCP server, over stdio or streamable HTTP.

Needs the ``mcp`` package (``pip install 'dex-agents[mcp]'``); it is imported when a
source is created, so the rest of dex-agents works without it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from dex_agents._enums import ToolEffect
from dex_agents._runner import DeferredToolExecution, ToolExecutionError
from dex_agents._tool_input import ToolInputAnswer, ToolInputRequired, ToolQuestion
from dex_agents._tool_sources import SourceTool

if TYPE_CHECKING:
    import mcp_types
    from mcp import Client, StdioServerParameters
    from mcp.client import ClientRequestContext, Transport

IDEMPOTENCY_KEY_META = "dex/idempotency_key"
"""The ``_meta`` key of every ``tools/call`` request that carries the call's idempotency key.

Its value is ``"<session_id>/<turn_id>/<tool_call_id>"``, the same on every attempt of the
call; a server that writes should apply a call with a key it has seen only once.
"""

_WAITING = "the question waits for a person's answer"


def effect_of_annotations(annotations: mcp_types.ToolAnnotations | None) -> ToolEffect | None:
    """Return the effect an MCP tool's annotations declare, or None when they declare none.

    ``readOnlyHint`` gives ``READ``; else ``idempotentHint`` gives ``IDEMPOTENT_WRITE``;
    anything else leaves the session's ``default_tool_effect`` to decide (an explicit
    ``ToolPolicy`` wins over all of these).
    """
    if annotations is None:
        return None
    if annotations.read_only_hint is True:
        return ToolEffect.READ
    if annotations.idempotent_hint is True:
        return ToolEffect.IDEMPOTENT_WRITE
    return None


class MCPToolSource:
    """The tools of one MCP server, as a ``ToolSource`` any adapter can attach to an agent.

    Use :meth:`stdio` for a server the Worker starts as a child process and :meth:`http`
    for a streamable HTTP endpoint. Attach it with the adapter's ``source_tools`` function
    (``dex_agents_pydantic_ai.source_tools``, ``dex_agents_openai_agents.source_tools``,
    ``dex_agents_langgraph.source_tools``).

    Each call opens its own MCP session inside the call's tool Step and closes it when the
    call returns, so no connection is assumed to survive a Worker crash or a retry (a
    stdio server is started per call). Every ``tools/call`` request carries the call's
    idempotency key in ``_meta`` under ``"dex/idempotency_key"``; a retried read or
    idempotent write sends the same key again.

    Effects come from the tools' annotations (``readOnlyHint`` -> ``READ``,
    ``idempotentHint`` -> ``IDEMPOTENT_WRITE``, else the session default); an explicit
    ``AgentSessionOptions.tool_policies`` entry always wins.

    Elicitation: when the server asks the user for input during a call, the call's Step
    ends with a durable ``question`` interrupt (``AgentSnapshot.pending_interrupts``,
    ``kind="question"``), which may wait for days and across Worker restarts. Answering it
    (``resolve_interrupt(..., approved=True, answer={...})``, or ``approved=False`` to
    decline) runs the call again from the start on a new session, and each question the
    server asks again gets its recorded answer, matched by its message and schema. This is
    sound only for tools whose effect may repeat, so a single-attempt call (a
    non-idempotent write or an unclassified tool) that asks a question is recorded
    ``failed`` with a message saying so, and the model sees it.

    Args:
        server: ``mcp.StdioServerParameters``, a streamable HTTP URL, or any
            ``mcp.client.Transport``.
        include: offer only the tools with these MCP names; None (default) offers all.
        prefix: put before each tool's name as the model sees it (default none), e.g.
            ``"billing_"`` to keep two servers' names apart.
        read_timeout_seconds: how long one request may wait for the server (default 60).

    Raises:
        ModuleNotFoundError: the ``mcp`` package is not installed.

    """

    def __init__(
        self,
        server: StdioServerParameters | Transport | str,
        *,
        include: Collection[str] | None = None,
        prefix: str = "",
        read_timeout_seconds: float = 60.0,
    ) -> None:
        import mcp  # noqa: F401  (fail at construction when the extra is missing)

        if read_timeout_seconds <= 0:
            raise ValueError("read_timeout_seconds must be positive")
        self._server = server
        self._include = None if include is None else frozenset(include)
        self._prefix = prefix
        self._timeout = read_timeout_seconds

    @classmethod
    def stdio(
        cls,
        command: str,
        args: Sequence[str] = (),
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
        include: Collection[str] | None = None,
        prefix: str = "",
        read_timeout_seconds: float = 60.0,
    ) -> MCPToolSource:
        """Return a source for a server the Worker starts as ``command args...`` (stdio).

        ``env`` replaces the child's environment when given (the MCP SDK then adds only a
        few safe variables such as ``PATH``); ``cwd`` is its working directory.
        """
        from mcp import StdioServerParameters

        params = StdioServerParameters(
            command=command,
            args=list(args),
            env=None if env is None else dict(env),
            cwd=cwd,
        )
        return cls(
            params, include=include, prefix=prefix, read_timeout_seconds=read_timeout_seconds
        )

    @classmethod
    def http(
        cls,
        url: str,
        *,
        include: Collection[str] | None = None,
        prefix: str = "",
        read_timeout_seconds: float = 60.0,
    ) -> MCPToolSource:
        """Return a source for a streamable HTTP MCP endpoint, e.g. ``http://host:8000/mcp``."""
        return cls(url, include=include, prefix=prefix, read_timeout_seconds=read_timeout_seconds)

    async def list_tools(self) -> Sequence[SourceTool]:
        """List the server's tools (all pages), in the server's order.

        Raises:
            mcp.shared.exceptions.MCPError: the server refused the listing.
            OSError: the server could not be reached or started.

        """
        tools: list[SourceTool] = []
        async with self._client() as client:
            cursor: str | None = None
            while True:
                page = await client.list_tools(cursor=cursor, cache_mode="bypass")
                for tool in page.tools:
                    if self._include is not None and tool.name not in self._include:
                        continue
                    tools.append(
                        SourceTool(
                            name=self._prefix + tool.name,
                            description=tool.description or tool.title or tool.name,
                            input_schema=dict(tool.input_schema),
                            effect=effect_of_annotations(tool.annotations),
                        )
                    )
                cursor = page.next_cursor
                if not cursor:
                    return tools

    async def call_tool(
        self, tool: SourceTool, arguments: Mapping[str, Any], call: DeferredToolExecution
    ) -> str:
        """Run one ``tools/call`` on a new session and return the result's text.

        Raises:
            ToolExecutionError: the server reported the call as an error (``isError``).
            ToolInputRequired: the server asked a question no recorded answer answers.
            Exception: a protocol or transport failure (a Step failure).

        """
        from mcp.shared.exceptions import MCPError

        replay = _AnswerReplay(call.answers)
        result: mcp_types.CallToolResult | None = None
        failure: MCPError | None = None
        # Raise only after the session closed: inside it, anyio wraps errors in groups.
        async with self._client(replay) as client:
            try:
                result = await client.call_tool(
                    self._remote_name(tool.name),
                    dict(arguments),
                    meta=_meta(call.idempotency_key),
                )
            except MCPError as error:
                failure = error
        if replay.unanswered is not None:
            # Also when the server went on without the answer it asked for: the call that
            # counts runs with the person's answer.
            raise ToolInputRequired(replay.unanswered)
        if failure is not None or result is None:
            raise failure or RuntimeError("the MCP server returned no result")
        text = _result_text(result)
        if result.is_error:
            raise ToolExecutionError(text or f"the MCP tool {tool.name!r} failed")
        return text

    def _remote_name(self, name: str) -> str:
        return name[len(self._prefix) :] if self._prefix and name.startswith(self._prefix) else name

    def _client(self, replay: _AnswerReplay | None = None) -> Client:
        from mcp import Client

        return Client(
            self._server,
            read_timeout_seconds=self._timeout,
            elicitation_callback=None if replay is None else replay.answer,
            cache=None,
        )


def question_key(params: mcp_types.ElicitRequestParams) -> str:
    """Return the key that matches a recorded answer to a server's question.

    It hashes the question's mode, message and requested schema (or URL), so the same
    question asked again when the call runs again finds its answer.
    """
    body = params.model_dump(mode="json", by_alias=True, exclude={"meta", "task"})
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


class _AnswerReplay:
    """The elicitation callback of one call: recorded answers, then the first new question."""

    def __init__(self, answers: Sequence[ToolInputAnswer]) -> None:
        self._answers = list(answers)
        self._used = [False] * len(self._answers)
        self.unanswered: ToolQuestion | None = None

    async def answer(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        import mcp_types

        key = question_key(params)
        for index, recorded in enumerate(self._answers):
            if not self._used[index] and recorded.key == key:
                self._used[index] = True
                return mcp_types.ElicitResult(
                    action="accept" if recorded.action == "accept" else "decline",
                    content=recorded.content if recorded.action == "accept" else None,
                )
        if self.unanswered is None:
            url = params.url if isinstance(params, mcp_types.ElicitRequestURLParams) else None
            schema = (
                dict(params.requested_schema)
                if isinstance(params, mcp_types.ElicitRequestFormParams)
                else None
            )
            self.unanswered = ToolQuestion(
                key=key, message=params.message, requested_schema=schema, url=url
            )
        # Refusing ends this call on the server; the call runs again once answered.
        return mcp_types.ErrorData(code=mcp_types.INVALID_REQUEST, message=_WAITING)


def _meta(idempotency_key: str) -> mcp_types.RequestParamsMeta:
    # An open map: the namespaced key rides beside the protocol's own keys.
    return cast("mcp_types.RequestParamsMeta", {IDEMPOTENCY_KEY_META: idempotency_key})


def _result_text(result: mcp_types.CallToolResult) -> str:
    import mcp_types

    parts: list[str] = []
    for block in result.content:
        if isinstance(block, mcp_types.TextContent):
            parts.append(block.text)
        else:
            parts.append(block.model_dump_json(by_alias=True, exclude_none=True))
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, sort_keys=True))
    return "\n".join(parts)
