"""LangGraphRunner: runs a compiled LangGraph agent one model call per RunModel Step."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from dex_agents import (
    AgentTurnContext,
    AgentTurnOutcome,
    AgentUsage,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    ToolCallsRequested,
    ToolExecutionError,
    ToolExecutionResult,
    TurnCompleted,
)
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.pregel import Pregel
from pydantic import ValidationError

from dex_agents_langgraph._items import (
    RunState,
    RunStateError,
    cut_prefix,
    decode_run_state,
    encode_run_state,
    from_stored,
    human_item,
    pending_tool_calls,
    restore_prefix,
    to_framework_message,
    tool_output_text,
    tool_result_message,
    with_approved_arguments,
)
from dex_agents_langgraph._policies import tool_effect
from dex_agents_langgraph._streaming import forward_message_chunk


class TooManyModelCallsError(RuntimeError):
    """The graph started more model calls in one RunModel Step than allowed."""


class _ModelCallGuard(BaseCallbackHandler):
    """Counts model calls of one step, refuses the one too many, sums their usage."""

    raise_error = True
    # Not inline: LangChain leaves the other handlers' coroutines unawaited when an
    # inline handler raises.
    run_inline = False

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls = 0
        self.usage = AgentUsage()
        self._lock = threading.Lock()

    def _started(self) -> None:
        with self._lock:
            self.calls += 1
            calls = self.calls
        if calls > self.limit:
            raise TooManyModelCallsError(
                f"the graph started model call {calls} in one RunModel Step (limit "
                f"{self.limit}); see max_model_calls_per_step"
            )

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self._started()

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], **kwargs: Any) -> None:
        self._started()

    def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        usage = AgentUsage(requests=1)
        generation = response.generations[0][0] if response.generations else None
        if isinstance(generation, ChatGeneration) and isinstance(generation.message, AIMessage):
            meta = generation.message.usage_metadata
            if meta is not None:
                usage = AgentUsage(
                    requests=1,
                    input_tokens=meta.get("input_tokens", 0),
                    output_tokens=meta.get("output_tokens", 0),
                    total_tokens=meta.get("total_tokens", 0),
                )
        with self._lock:
            self.usage = self.usage.plus(usage)


def _find_tool_nodes(agent: Pregel[Any, Any, Any, Any]) -> dict[str, ToolNode]:
    return {
        name: node.bound for name, node in agent.nodes.items() if isinstance(node.bound, ToolNode)
    }


class LangGraphRunner:
    """Runs a compiled LangGraph graph (for example ``create_agent``'s) as a dex-agents runner.

    Attach it to the user's agent unchanged and give it to ``AgentSessionFlow``::

        agent = create_agent(model, tools=[lookup_order, add_note], system_prompt=...)
        flow = AgentSessionFlow(LangGraphRunner(agent), flow_type="SupportDesk", options=...)

    Each ``run_model_step`` runs a copy of the graph on a fresh in-memory checkpointer
    with ``interrupt_before`` its tool nodes, so LangGraph itself stops before any tool
    runs. The thread's checkpoint (minus the messages the session already stores) is the
    run state; the next step restores it, writes each tool's recorded result with
    ``update_state(..., as_node=<tool node>)`` and lets the graph continue into the model.
    ``execute_deferred_tool_call`` runs the tool object itself (``BaseTool.ainvoke``).

    Args:
        agent: a compiled graph whose state has a messages channel (``add_messages``).
            Its own checkpointer is not used: history comes from the session.
        tools: tools to run that are not in a ``ToolNode`` of the graph (they are looked
            up by name before the graph's own); default none.
        tool_nodes: the nodes to stop before; default every node that is a ``ToolNode``
            (``"tools"`` in ``create_agent`` graphs).
        messages_key: the state channel holding the conversation (default "messages").
        max_model_calls_per_step: model calls allowed in one step (default 1). The graph
            fails the step when it starts one more (middleware or nodes that call models
            several times); raise it only for such graphs, whose extra calls then repeat
            on a RunModel retry.
        config: extra ``RunnableConfig`` for every graph run and tool call (for example
            ``configurable`` values); ``thread_id`` and ``callbacks`` are set by the runner.
        context: the LangGraph runtime context passed to every graph run (``context=``).

    Raises:
        ValueError: the graph has no tool node and ``tool_nodes`` is not given.

    Concurrency: stateless between calls; ``execute_deferred_tool_call`` may run
    concurrently with itself.

    """

    def __init__(
        self,
        agent: Pregel[Any, Any, Any, Any],
        *,
        tools: Sequence[BaseTool] = (),
        tool_nodes: Sequence[str] | None = None,
        messages_key: str = "messages",
        max_model_calls_per_step: int = 1,
        config: RunnableConfig | None = None,
        context: Any = None,
    ) -> None:
        found = _find_tool_nodes(agent)
        self.agent = agent
        self.tool_nodes = list(tool_nodes) if tool_nodes is not None else sorted(found)
        if not self.tool_nodes:
            raise ValueError("the graph has no ToolNode; pass tool_nodes= to name its tool nodes")
        by_name: dict[str, BaseTool] = {}
        for node in found.values():
            by_name.update(node.tools_by_name)
        by_name.update({tool.name: tool for tool in tools})
        self.tools: Mapping[str, BaseTool] = by_name
        self.messages_key = messages_key
        self.max_model_calls_per_step = max_model_calls_per_step
        self.config: RunnableConfig = config or {}
        self.context = context

    # ------------------------------------------------------------------ contract

    def build_user_message(self, text: str) -> FrameworkMessage:
        """Return the user message as a LangChain ``HumanMessage`` item."""
        return human_item(text)

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        """Run the graph until it stops before its tool nodes or ends (one model call)."""
        saver = InMemorySaver()
        graph = self.agent.copy(
            update={
                "checkpointer": saver,
                "interrupt_before_nodes": self.tool_nodes,
                "interrupt_after_nodes": [],
            }
        )
        guard = _ModelCallGuard(self.max_model_calls_per_step)
        config: RunnableConfig = {
            **self.config,
            "configurable": {**self.config.get("configurable", {}), "thread_id": turn.flow_id},
            "callbacks": [guard],
        }
        prefix = from_stored(turn.messages)
        graph_input: Any = {self.messages_key: prefix}
        if turn.framework_run_state is not None:
            await self._resume(graph, saver, config, turn, prefix)
            graph_input = None

        async for item in graph.astream(
            graph_input, config, stream_mode="messages", context=self.context
        ):
            chunk = item[0] if isinstance(item, tuple) else item
            if isinstance(chunk, BaseMessage):
                forward_message_chunk(turn.events, chunk)

        snapshot = await graph.aget_state(config)
        messages: list[BaseMessage] = list(snapshot.values.get(self.messages_key) or [])
        if not snapshot.next:
            known = {m.id for m in prefix}
            produced = [to_framework_message(m) for m in messages if m.id not in known]
            return TurnCompleted(new_messages=produced, usage=guard.usage)
        stopped_at = sorted(set(snapshot.next))
        if not set(stopped_at) <= set(self.tool_nodes):
            raise RuntimeError(
                f"the graph stopped before {stopped_at}: only stops before tool nodes "
                f"{self.tool_nodes} are supported (no interrupt() inside the graph)"
            )
        calls = pending_tool_calls(messages)
        if not calls:
            raise RuntimeError(f"the graph stopped before {stopped_at} with no pending tool call")
        stored = await saver.aget_tuple(config)
        if stored is None:
            raise RuntimeError("the graph stopped before its tools but left no checkpoint")
        state = RunState(
            checkpoint=cut_prefix(stored.checkpoint, prefix, self.messages_key),
            metadata=stored.metadata,
            writes=[tuple(w) for w in stored.pending_writes or []],
            prefix_count=len(prefix),
            prefix_last_id=prefix[-1].id if prefix else None,
            tool_nodes=stopped_at,
        )
        deferred = [
            DeferredToolCall(
                tool_call_id=call.get("id") or "",
                tool_name=call["name"],
                arguments=json.dumps(call["args"]),
                policy=turn.resolve_tool_policy(
                    call["name"], tool_effect(self.tools.get(call["name"]))
                ),
            )
            for call in calls
        ]
        return ToolCallsRequested(
            framework_run_state=encode_run_state(state, saver.serde),
            tool_calls=deferred,
            usage=guard.usage,
        )

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run the LangChain tool once; tool errors the model should see fail the call.

        Argument validation errors, ``ToolException`` and tool messages with
        ``status="error"`` raise ``ToolExecutionError``; any other exception is a Step
        failure and follows the effect's retry policy.
        """
        record = call.tool_call
        tool = self.tools.get(record.tool_name)
        if tool is None:
            raise ToolExecutionError(f"there is no tool named {record.tool_name!r}")
        try:
            args = json.loads(record.arguments) if record.arguments else {}
        except ValueError as error:
            raise ToolExecutionError(f"the arguments are not JSON: {error}") from error
        tool_call = {
            "type": "tool_call",
            "id": record.tool_call_id,
            "name": tool.name,
            "args": args,
        }
        try:
            result = await tool.ainvoke(tool_call, config=self.config)
        except (ValidationError, ToolException) as error:
            raise ToolExecutionError(str(error)) from error
        if isinstance(result, ToolMessage):
            output = tool_output_text(result.content)
            if result.status == "error":
                raise ToolExecutionError(output)
            return ToolExecutionResult(output=output)
        if type(result).__name__ == "Command":
            raise ToolExecutionError("tools that return a LangGraph Command are not supported")
        return ToolExecutionResult(output=tool_output_text(result))

    # ------------------------------------------------------------------ resume

    async def _resume(
        self,
        graph: Pregel[Any, Any, Any, Any],
        saver: InMemorySaver,
        config: RunnableConfig,
        turn: AgentTurnContext,
        prefix: Sequence[BaseMessage],
    ) -> None:
        assert turn.framework_run_state is not None
        state = decode_run_state(turn.framework_run_state, saver.serde)
        last_id = prefix[-1].id if prefix else None
        if state.prefix_count != len(prefix) or state.prefix_last_id != last_id:
            raise RunStateError("the run state does not match the session's stored messages")
        if len(state.tool_nodes) != 1:
            raise RunStateError(f"the graph stopped before several tool nodes {state.tool_nodes}")
        checkpoint = restore_prefix(state.checkpoint, prefix, self.messages_key)
        target: RunnableConfig = {"configurable": {"thread_id": turn.flow_id, "checkpoint_ns": ""}}
        saved = await saver.aput(target, checkpoint, state.metadata, checkpoint["channel_versions"])
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in state.writes:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await saver.aput_writes(saved, writes, task_id)

        snapshot = await graph.aget_state(config)
        messages = snapshot.values.get(self.messages_key) or []
        calls = pending_tool_calls(messages)
        results: list[BaseMessage] = [
            tool_result_message(c, turn.recorded_tool_call(c.get("id") or "")) for c in calls
        ]
        edited = with_approved_arguments(messages, turn.tool_calls)
        if edited is not None:
            # Like LangGraph's own "edit" decision: the AI message (same ID, so the
            # messages reducer replaces it) now asks for the arguments that ran.
            results.insert(0, edited)
        await graph.aupdate_state(config, {self.messages_key: results}, as_node=state.tool_nodes[0])
