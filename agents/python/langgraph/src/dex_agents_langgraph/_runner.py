"""LangGraphRunner: runs a compiled LangGraph agent one model call per RunModel Step."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from dex_agents import (
    AgentToolCall,
    AgentTurnContext,
    AgentUsage,
    ContinueTurn,
    DeferredToolCall,
    DeferredToolExecution,
    FrameworkMessage,
    ModelStepOutcome,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    ToolExecutionResult,
    ToolInputRequired,
    ToolPolicy,
    TurnCompleted,
)
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.messages.tool import ToolCall
from langchain_core.outputs import ChatGeneration, LLMResult
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, ToolException
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import ToolNode
from langgraph.pregel import Pregel
from langgraph.types import Command, StateSnapshot
from pydantic import ValidationError

from dex_agents_langgraph._interrupts import (
    INTERRUPT_CALL_PREFIX,
    INTERRUPT_TOOL_NAME,
    command_text,
    decode_commands,
    encode_commands,
    find_tool_node,
    interrupt_arguments,
    question_for,
    resume_value,
    run_in_tool_node,
)
from dex_agents_langgraph._items import (
    RunState,
    RunStateError,
    carried_state,
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
    with_carried_state,
)
from dex_agents_langgraph._policies import tool_effect
from dex_agents_langgraph._streaming import forward_message_chunk


class TooManyModelCallsError(RuntimeError):
    """The graph started more model calls in one RunModel Step than allowed."""


class _NextModelNode(Exception):
    """Another graph node starts a model call: the step ends before it (``ContinueTurn``)."""


class _QuietStop(logging.Filter):
    """Drops LangChain's warning about a handler that raised, when it raised our stop."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not any(
            isinstance(arg, str) and "_NextModelNode(" in arg for arg in record.args or ()
        )


logging.getLogger("langchain_core.callbacks.manager").addFilter(_QuietStop())


class _ModelCallGuard(BaseCallbackHandler):
    """Counts model calls of one step, stops the one too many, sums their usage.

    A call past the limit from a node task that has not called the model in this step
    stops the step before that node (the next RunModel Step runs it); one from a task that
    already did (a node calling the model several times) fails it.
    """

    raise_error = True
    # Not inline: LangChain leaves the other handlers' coroutines unawaited when an
    # inline handler raises.
    run_inline = False

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.calls = 0
        self.usage = AgentUsage()
        self.stopped_before_node = False
        self._tasks: set[str] = set()
        self._lock = threading.Lock()

    def _started(self, metadata: Mapping[str, Any] | None) -> None:
        task = str((metadata or {}).get("langgraph_checkpoint_ns", ""))
        with self._lock:
            self.calls += 1
            calls = self.calls
            new_task = bool(task) and task not in self._tasks
            if calls > self.limit and new_task:
                self.calls -= 1
                self.stopped_before_node = True
                raise _NextModelNode(task)
            self._tasks.add(task)
        if calls > self.limit:
            raise TooManyModelCallsError(
                f"the graph started model call {calls} in one RunModel Step (limit "
                f"{self.limit}) from a node that already called the model in this Step; "
                "see max_model_calls_per_step"
            )

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], **kwargs: Any
    ) -> None:
        self._started(kwargs.get("metadata"))

    def on_llm_start(self, serialized: dict[str, Any], prompts: list[str], **kwargs: Any) -> None:
        self._started(kwargs.get("metadata"))

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


def _find_hitl(agent: Pregel[Any, Any, Any, Any]) -> dict[str, Any]:
    """The graph's human-in-the-loop middleware nodes, by node name.

    Raises:
        ValueError: the graph has several such middleware nodes.

    """
    try:
        from langchain.agents.middleware import HumanInTheLoopMiddleware
    except ImportError:  # pragma: no cover - langchain is optional for plain graphs
        return {}
    found: dict[str, Any] = {}
    for name, node in agent.nodes.items():
        bound = node.bound
        owner = getattr(getattr(bound, "afunc", None), "__self__", None) or getattr(
            getattr(bound, "func", None), "__self__", None
        )
        if isinstance(owner, HumanInTheLoopMiddleware):
            found[name] = owner
    if len(found) > 1:
        raise ValueError(
            f"the graph has several HumanInTheLoopMiddleware nodes {sorted(found)}; "
            "use one middleware with every tool in its interrupt_on"
        )
    return found


def _carried_keys(agent: Pregel[Any, Any, Any, Any], messages_key: str) -> set[str]:
    """State keys besides the messages that the graph takes as input and keeps."""
    try:
        accepted = set(agent.get_input_jsonschema().get("properties", {}))
    except Exception:
        return set()
    output = agent.output_channels
    kept = {output} if isinstance(output, str) else set(output)
    return (accepted & kept) - {messages_key}


def _holds_agent(graph: Pregel[Any, Any, Any, Any]) -> bool:
    return bool(_find_tool_nodes(graph)) or any(
        isinstance(n.bound, Pregel) and _holds_agent(n.bound) for n in graph.nodes.values()
    )


def _find_subgraph_agents(
    agent: Pregel[Any, Any, Any, Any],
) -> dict[str, Pregel[Any, Any, Any, Any]]:
    """Nodes that are compiled agents (graphs with a ``ToolNode``), one level deep.

    Raises:
        ValueError: such a subgraph itself nests an agent.

    """
    found: dict[str, Pregel[Any, Any, Any, Any]] = {}
    for name, node in agent.nodes.items():
        bound = node.bound
        if not isinstance(bound, Pregel):
            continue
        for inner_name, inner in bound.nodes.items():
            if isinstance(inner.bound, Pregel) and _holds_agent(inner.bound):
                raise ValueError(
                    f"node {name!r} nests the agent {inner_name!r} two levels deep; "
                    "agents are supported as direct nodes of the session's graph: add "
                    f"{inner_name!r} to the outer graph itself"
                )
        if _find_tool_nodes(bound):
            found[name] = bound
    return found


def _needs_state(nodes: Mapping[str, ToolNode]) -> bool:
    """Whether a tool reads the graph state (``InjectedState`` or ``ToolRuntime``)."""
    for node in nodes.values():
        for injected in getattr(node, "_injected_args", {}).values():
            if getattr(injected, "state", None) or getattr(injected, "runtime", None):
                return True
    return False


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
    ``execute_deferred_tool_call`` runs the call through the graph's own ``ToolNode``
    (``InjectedState``, ``ToolRuntime``, ``Command`` results, ``wrap_tool_call``).

    What LangGraph would pause for becomes durable: ``interrupt()`` in a tool or a node is
    a ``question`` interrupt whose answer resumes it (``Command(resume=...)``), and a
    ``HumanInTheLoopMiddleware``'s calls are approvals whose answers reach it as its
    decisions. A second model node ends the step with ``ContinueTurn`` (each model call
    its own Step); an agent graph used as a node stops before its own tool nodes.

    Args:
        agent: a compiled graph whose state has a messages channel (``add_messages``).
            Its own checkpointer is not used: history comes from the session.
        tools: tools to run that are not in a ``ToolNode`` of the graph (they are looked
            up by name before the graph's own); default none.
        tool_nodes: the nodes to stop before; default every node that is a ``ToolNode``
            (``"tools"`` in ``create_agent`` graphs).
        messages_key: the state channel holding the conversation (default "messages").
        max_model_calls_per_step: model calls allowed in one step (default 1). One more
            from another node ends the step before it (``ContinueTurn``); one more from a
            node that already called the model (middleware or nodes that call models
            several times) fails the step with ``TooManyModelCallsError``. Raise it only
            for such graphs, whose extra calls then repeat on a RunModel retry.
        config: extra ``RunnableConfig`` for every graph run and tool call (for example
            ``configurable`` values); ``thread_id`` and ``callbacks`` are set by the runner.
        context: the LangGraph runtime context passed to every graph run (``context=``).

    Raises:
        ValueError: the graph has no tool node (nor an agent node) and ``tool_nodes`` is
            not given; it has two ``HumanInTheLoopMiddleware`` nodes; or it nests an agent
            two graph levels deep. Each message names what works instead.

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
        self._subgraphs = _find_subgraph_agents(agent)
        inner_nodes = {
            f"{name}/{tool_node}": bound
            for name, sub in self._subgraphs.items()
            for tool_node, bound in _find_tool_nodes(sub).items()
        }
        self._inner_tool_nodes = sorted({n.split("/", 1)[1] for n in inner_nodes})
        found_all = {**found, **inner_nodes}
        self._tool_nodes = found_all
        self._hitl = _find_hitl(agent)
        # Tools that read the state need the whole conversation in the run state (their
        # Step has no other copy of it); otherwise the stored messages are cut out of it.
        self._keep_history = _needs_state(found_all)
        self._carried = _carried_keys(agent, messages_key)
        self.agent = agent
        self.tool_nodes = list(tool_nodes) if tool_nodes is not None else sorted(found)
        if not self.tool_nodes and not self._subgraphs:
            raise ValueError("the graph has no ToolNode; pass tool_nodes= to name its tool nodes")
        by_name: dict[str, BaseTool] = {}
        for node in found_all.values():
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

    async def run_model_step(self, turn: AgentTurnContext) -> ModelStepOutcome:
        """Run the graph until it stops before its tool nodes, at an interrupt, or ends.

        The step makes one model call (``max_model_calls_per_step``). When it continues a
        turn, it first gives the graph what the session recorded: tool results as the tool
        node's writes, a human-in-the-loop middleware's decisions, or the answers to
        ``interrupt()`` calls as ``Command(resume=...)``.
        """
        saver = InMemorySaver()
        graph = self._graph(saver)
        guard = _ModelCallGuard(self.max_model_calls_per_step)
        config = self._run_config(turn.flow_id, [guard])
        prefix = from_stored(turn.messages)
        graph_input: Any = {
            **carried_state(turn.messages, self._carried, saver.serde),
            self.messages_key: prefix,
        }
        if turn.framework_run_state is not None:
            graph_input = await self._resume(graph, saver, config, turn, prefix)

        while True:
            try:
                async for item in graph.astream(
                    graph_input, config, stream_mode="messages", context=self.context
                ):
                    chunk = item[0] if isinstance(item, tuple) else item
                    if isinstance(chunk, BaseMessage):
                        forward_message_chunk(turn.events, chunk)
            except _NextModelNode:
                if not guard.stopped_before_node:
                    raise
            except Exception as error:
                # LangGraph may wrap a callback's exception; the stop is ours all the same.
                if not guard.stopped_before_node or not _caused_by_stop(error):
                    raise
            snapshot, stop = await self._stop_point(graph, config)
            messages: list[BaseMessage] = list(snapshot.values.get(self.messages_key) or [])
            inner_messages: list[BaseMessage] = list(stop.values.get(self.messages_key) or [])
            calls = pending_tool_calls(inner_messages)
            stopped = stop.next
            if (
                not snapshot.interrupts
                and self._is_tool_stop(stop)
                and calls
                and all((c.get("id") or "") in turn.tool_calls for c in calls)
            ):
                # Calls the session already ran (approved through the middleware): give
                # the graph their results and let it go on.
                await self._write_results(
                    graph, stop.config, turn, inner_messages, stopped[0], saver
                )
                graph_input = None
                continue
            break

        if guard.stopped_before_node:
            # Another model node comes next: it runs in the next RunModel Step.
            return ContinueTurn(
                framework_run_state=await self._run_state(saver, config, prefix, []),
                usage=guard.usage,
                reason="next_node",
            )
        if not snapshot.next:
            known = {m.id for m in prefix}
            produced = [to_framework_message(m) for m in messages if m.id not in known]
            values = {k: v for k, v in snapshot.values.items() if k in self._carried}
            return TurnCompleted(
                new_messages=with_carried_state(produced, values, saver.serde),
                usage=guard.usage,
            )

        if snapshot.interrupts:
            deferred = self._interrupt_calls(turn, snapshot, calls)
            stopped_at: list[str] = []
        else:
            stopped_at = stopped
            if not self._is_tool_stop(stop):
                raise RuntimeError(
                    f"the graph stopped before {stopped}: only stops before tool nodes "
                    f"{self.tool_nodes} and interrupt() calls are supported"
                )
            if not calls:
                raise RuntimeError(f"the graph stopped before {stopped} with no pending tool call")
            deferred = [self._deferred(turn, call, gated=self._gated(call)) for call in calls]
        return ToolCallsRequested(
            framework_run_state=await self._run_state(saver, config, prefix, stopped_at),
            tool_calls=deferred,
            usage=guard.usage,
        )

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """Run the LangChain tool once, through the graph's ``ToolNode``.

        The tool gets its ``InjectedState`` / ``ToolRuntime`` from the graph state the model
        call left (``DeferredToolExecution.framework_run_state``) and runs inside the
        agent's ``wrap_tool_call`` middleware. An ``interrupt()`` in the tool asks a
        durable question (``ToolInputRequired``); the answer resumes it, the tool running
        again from its start as in LangGraph. A ``Command`` result is kept for the next
        model step, which applies its state update.

        Argument validation errors, ``ToolException`` and tool messages with
        ``status="error"`` raise ``ToolExecutionError``; any other exception is a Step
        failure and follows the effect's retry policy.
        """
        record = call.tool_call
        if record.tool_name == INTERRUPT_TOOL_NAME and record.tool_call_id.startswith(
            INTERRUPT_CALL_PREFIX
        ):
            return self._answer_interrupt(call)
        tool = self.tools.get(record.tool_name)
        if tool is None:
            raise ToolExecutionError(f"there is no tool named {record.tool_name!r}")
        try:
            args = json.loads(record.arguments) if record.arguments else {}
        except ValueError as error:
            raise ToolExecutionError(f"the arguments are not JSON: {error}") from error
        tool_call: dict[str, Any] = {
            "type": "tool_call",
            "id": record.tool_call_id,
            "name": tool.name,
            "args": args,
        }
        node = find_tool_node(self._tool_nodes, tool)
        auto = None
        hitl = self._per_call_hitl()
        if hitl is not None and record.tool_name in hitl.interrupt_on:
            # The session already approved the call: answer the middleware's own
            # per-call question with that decision, its edit included.
            allowed = hitl.interrupt_on[record.tool_name].get("allowed_decisions") or []
            may_edit = "edit" in allowed
            auto = _per_call_answer(record, may_edit=may_edit)
            if may_edit and record.arguments_edited and record.proposed_arguments:
                # The middleware applies the edit itself, as the reviewer's.
                tool_call["args"] = json.loads(record.proposed_arguments)
        try:
            if node is None:
                outputs: list[Any] = [await tool.ainvoke(tool_call, config=self.config)]
            else:
                state = await self._tool_state(call)
                outputs = list(
                    await run_in_tool_node(
                        node,
                        tool_call,
                        state,
                        call.answers,
                        config=dict(self.config),
                        context=self.context,
                        auto=auto,
                    )
                )
        except (ValidationError, ToolException) as error:
            raise ToolExecutionError(str(error)) from error
        if any(isinstance(o, Command) for o in outputs):
            text = command_text(outputs, record.tool_call_id)
            return ToolExecutionResult(output=encode_commands(text, outputs, _SERDE))
        result = outputs[0] if outputs else ""
        if isinstance(result, ToolMessage):
            output = tool_output_text(result.content)
            if result.status == "error":
                raise ToolExecutionError(output)
            return ToolExecutionResult(output=output)
        return ToolExecutionResult(output=tool_output_text(result))

    # ------------------------------------------------------------------ helpers

    async def _run_state(
        self,
        saver: InMemorySaver,
        config: RunnableConfig,
        prefix: Sequence[BaseMessage],
        stopped_at: list[str],
    ) -> str:
        stored = await saver.aget_tuple(config)
        if stored is None:
            raise RuntimeError("the graph stopped but left no checkpoint")
        cut = [] if self._keep_history else prefix
        # Agent nodes keep checkpoints of their own, one namespace each: the latest of each.
        latest: dict[str, Any] = {}
        thread = config.get("configurable", {}).get("thread_id")
        async for found in saver.alist({"configurable": {"thread_id": thread}}):
            namespace = found.config["configurable"].get("checkpoint_ns", "")
            if not namespace:
                continue
            best = latest.get(namespace)
            if best is None or found.checkpoint["id"] > best.checkpoint["id"]:
                latest[namespace] = found
        state = RunState(
            checkpoint=cut_prefix(stored.checkpoint, cut, self.messages_key),
            metadata=stored.metadata,
            writes=[tuple(w) for w in stored.pending_writes or []],
            prefix_count=len(cut),
            prefix_last_id=cut[-1].id if cut else None,
            tool_nodes=stopped_at,
            subgraphs=[
                (ns, t.checkpoint, t.metadata, [tuple(w) for w in t.pending_writes or []])
                for ns, t in sorted(latest.items())
            ],
        )
        return encode_run_state(state, saver.serde)

    def _graph(self, saver: InMemorySaver) -> Pregel[Any, Any, Any, Any]:
        update: dict[str, Any] = {
            "checkpointer": saver,
            "interrupt_before_nodes": self.tool_nodes,
            "interrupt_after_nodes": [],
        }
        if self._subgraphs:
            # An agent used as a node stops before its own tool nodes, inside the node.
            nodes = dict(self.agent.nodes)
            for name, sub in self._subgraphs.items():
                stopping = sub.copy(
                    update={
                        "interrupt_before_nodes": sorted(_find_tool_nodes(sub)),
                        "interrupt_after_nodes": [],
                    }
                )
                nodes[name] = nodes[name].copy(update={"bound": stopping})
            update["nodes"] = nodes
        return self.agent.copy(update=update)

    async def _stop_point(
        self, graph: Pregel[Any, Any, Any, Any], config: RunnableConfig
    ) -> tuple[StateSnapshot, _Stop]:
        """The graph's state and where it stopped: at the top or inside an agent node."""
        snapshot = await graph.aget_state(config, subgraphs=bool(self._subgraphs))
        stop = _Stop(config, sorted(set(snapshot.next)), dict(snapshot.values), inner=False)
        if not snapshot.interrupts:
            for task in snapshot.tasks:
                inner = task.state
                if task.name in self._subgraphs and isinstance(inner, StateSnapshot) and inner.next:
                    stop = _Stop(
                        inner.config, sorted(set(inner.next)), dict(inner.values), inner=True
                    )
        return snapshot, stop

    def _is_tool_stop(self, stop: _Stop) -> bool:
        names = self._inner_tool_nodes if stop.inner else self.tool_nodes
        return bool(stop.next) and set(stop.next) <= set(names)

    def _run_config(self, thread_id: str, callbacks: list[Any]) -> RunnableConfig:
        return {
            **self.config,
            "configurable": {**self.config.get("configurable", {}), "thread_id": thread_id},
            "callbacks": callbacks,
        }

    def _deferred(
        self, turn: AgentTurnContext, call: ToolCall, *, gated: bool | None
    ) -> DeferredToolCall:
        # gated: whether a human-in-the-loop middleware asks about the call (its
        # approval decision), None without such a middleware.
        name = call["name"]
        policy = turn.resolve_tool_policy(
            name, tool_effect(self.tools.get(name)), framework_requires_approval=gated
        )
        return DeferredToolCall(
            tool_call_id=call.get("id") or "",
            tool_name=name,
            arguments=json.dumps(call["args"]),
            policy=policy,
        )

    def _interrupt_calls(
        self, turn: AgentTurnContext, snapshot: StateSnapshot, calls: Sequence[ToolCall]
    ) -> list[DeferredToolCall]:
        """The deferred calls for the graph's pending interrupts.

        A human-in-the-loop middleware's request becomes the tool calls it asks about,
        needing approval; any other interrupt becomes a question in its own call.
        """
        deferred: list[DeferredToolCall] = []
        for task in snapshot.tasks:
            for pending in task.interrupts:
                if task.name in self._hitl and _is_hitl_request(pending.value):
                    gated = _gated_ids(calls, pending.value["action_requests"])
                    deferred.extend(
                        self._deferred(turn, c, gated=(c.get("id") or "") in gated) for c in calls
                    )
                    continue
                deferred.append(
                    DeferredToolCall(
                        tool_call_id=f"{INTERRUPT_CALL_PREFIX}{pending.id}",
                        tool_name=INTERRUPT_TOOL_NAME,
                        arguments=interrupt_arguments(
                            {"value": pending.value, "response_schema": pending.response_schema}
                        ),
                        policy=ToolPolicy(ToolEffect.READ, requires_approval=False),
                    )
                )
        return deferred

    def _answer_interrupt(self, call: DeferredToolExecution) -> ToolExecutionResult:
        """The "tool Step" of a graph interrupt: ask, then record the answer as output."""
        if not call.answers:
            raw = json.loads(call.tool_call.arguments)
            raise ToolInputRequired(
                question_for(raw.get("value"), "interrupt-1", raw.get("response_schema"))
            )
        return ToolExecutionResult(output=json.dumps(resume_value(call.answers[-1])))

    async def _tool_state(self, call: DeferredToolExecution) -> dict[str, Any]:
        """The graph state the model call left, as the tool node would read it."""
        if call.framework_run_state is None:
            return {}
        saver = InMemorySaver()
        graph = self._graph(saver)
        config = self._run_config(call.flow_id, [])
        state = decode_run_state(call.framework_run_state, saver.serde)
        await self._restore(saver, call.flow_id, state, [])
        _, stop = await self._stop_point(graph, config)
        return stop.values

    async def _restore(
        self,
        saver: InMemorySaver,
        thread_id: str,
        state: RunState,
        prefix: Sequence[BaseMessage],
    ) -> None:
        checkpoint = state.checkpoint
        if state.prefix_count:
            checkpoint = restore_prefix(checkpoint, prefix, self.messages_key)
        target: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        saved = await saver.aput(target, checkpoint, state.metadata, checkpoint["channel_versions"])
        by_task: dict[str, list[tuple[str, Any]]] = {}
        for task_id, channel, value in state.writes:
            by_task.setdefault(task_id, []).append((channel, value))
        for task_id, writes in by_task.items():
            await saver.aput_writes(saved, writes, task_id)
        for namespace, inner, metadata, inner_writes in state.subgraphs:
            place: RunnableConfig = {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": namespace}
            }
            put = await saver.aput(place, inner, metadata, inner["channel_versions"])
            grouped: dict[str, list[tuple[str, Any]]] = {}
            for task_id, channel, value in inner_writes:
                grouped.setdefault(task_id, []).append((channel, value))
            for task_id, writes in grouped.items():
                await saver.aput_writes(put, writes, task_id)

    async def _resume(
        self,
        graph: Pregel[Any, Any, Any, Any],
        saver: InMemorySaver,
        config: RunnableConfig,
        turn: AgentTurnContext,
        prefix: Sequence[BaseMessage],
    ) -> Any:
        """Restore the run state and return the graph's input that continues it."""
        assert turn.framework_run_state is not None
        state = decode_run_state(turn.framework_run_state, saver.serde)
        if state.prefix_count:
            last_id = prefix[-1].id if prefix else None
            if state.prefix_count != len(prefix) or state.prefix_last_id != last_id:
                raise RunStateError("the run state does not match the session's stored messages")
        await self._restore(saver, turn.flow_id, state, prefix)
        snapshot, stop = await self._stop_point(graph, config)
        messages = list(snapshot.values.get(self.messages_key) or [])
        if state.tool_nodes:
            if len(state.tool_nodes) != 1:
                raise RunStateError(
                    f"the graph stopped before several tool nodes {state.tool_nodes}"
                )
            inner = list(stop.values.get(self.messages_key) or [])
            await self._write_results(graph, stop.config, turn, inner, state.tool_nodes[0], saver)
            return None
        answers: dict[str, Any] = {}
        for task in snapshot.tasks:
            for pending in task.interrupts:
                if task.name in self._hitl and _is_hitl_request(pending.value):
                    calls = pending_tool_calls(messages)
                    gated = _gated_ids(calls, pending.value["action_requests"])
                    configs = list(pending.value.get("review_configs") or [])
                    asked = [c for c in calls if (c.get("id") or "") in gated]
                    answers[pending.id] = {
                        "decisions": [
                            _decision(
                                c,
                                turn.recorded_tool_call(c.get("id") or ""),
                                configs[i].get("allowed_decisions") if i < len(configs) else None,
                            )
                            for i, c in enumerate(asked)
                        ]
                    }
                    continue
                record = turn.recorded_tool_call(f"{INTERRUPT_CALL_PREFIX}{pending.id}")
                answers[pending.id] = (
                    json.loads(record.output)
                    if record.status is ToolCallStatus.SUCCEEDED and record.output
                    else None
                )
        # No interrupt pending: the state stopped before another model node.
        return Command(resume=answers) if answers else None

    async def _write_results(
        self,
        graph: Pregel[Any, Any, Any, Any],
        config: RunnableConfig,
        turn: AgentTurnContext,
        messages: Sequence[BaseMessage],
        node: str,
        saver: InMemorySaver,
    ) -> None:
        """Write each pending call's recorded result as if the tool node had run."""
        calls = pending_tool_calls(messages)
        results: list[BaseMessage] = []
        commands: list[Any] = []
        for call in calls:
            record = turn.recorded_tool_call(call.get("id") or "")
            stored = (
                decode_commands(record.output, saver.serde)
                if record.status is ToolCallStatus.SUCCEEDED
                else None
            )
            if stored is not None:
                commands.extend(
                    o if isinstance(o, Command) else Command(update={self.messages_key: [o]})
                    for o in stored
                )
                continue
            results.append(self._result_message(call, record))
        # The middleware keeps the model's call in the AI message and tells the model of
        # the edit in the result; other approved edits show the call that ran.
        gated = {name for hitl in self._hitl.values() for name in hitl.interrupt_on}
        records = {k: r for k, r in turn.tool_calls.items() if r.tool_name not in gated}
        edited = with_approved_arguments(messages, records)
        if edited is not None:
            # Like LangGraph's own "edit" decision: the AI message (same ID, so the
            # messages reducer replaces it) now asks for the arguments that ran.
            results.insert(0, edited)
        values: Any = {self.messages_key: results}
        if commands:
            values = [Command(update={self.messages_key: results}), *commands]
        await graph.aupdate_state(config, values, as_node=node)

    def _gated(self, call: ToolCall) -> bool | None:
        """The middleware's approval decision for a call it did not interrupt for."""
        hitl = next(iter(self._hitl.values()), None)
        if hitl is None:
            return None
        if hitl is self._per_call_hitl():
            return call["name"] in hitl.interrupt_on
        return False

    def _per_call_hitl(self) -> Any:
        hitl = next(iter(self._hitl.values()), None)
        return hitl if getattr(hitl, "interrupt_mode", "batched") == "per_call" else None

    def _result_message(self, call: ToolCall, record: AgentToolCall) -> ToolMessage:
        message = tool_result_message(call, record)
        per_call = self._per_call_hitl()
        if (
            per_call is not None
            and record.status is ToolCallStatus.REJECTED
            and call["name"] in per_call.interrupt_on
        ):
            # The rejection in the middleware's own words, as its per-call reviewer gives it.
            decision: dict[str, Any] = {"type": "reject"}
            if record.rejection_message:
                decision["message"] = record.rejection_message
            return _hitl_answer_message(call, decision) or message
        hitl = next(iter(self._hitl.values()), None)
        if (
            hitl is not None
            and record.arguments_edited
            and record.status is ToolCallStatus.SUCCEEDED
            and call["name"] in hitl.interrupt_on
        ):
            # The middleware tells the model, in its own words, that a reviewer edited it.
            plain = message.model_copy(update={"content": record.output or ""})
            executed = {"name": call["name"], "args": json.loads(record.arguments)}
            return cast(ToolMessage, hitl._prepend_notice(plain, executed))
        return message


_SERDE = InMemorySaver().serde


@dataclass(frozen=True)
class _Stop:
    """Where the graph stopped: the config to write tool results to, and that graph's state."""

    config: RunnableConfig
    next: list[str]
    values: dict[str, Any]
    inner: bool


def _caused_by_stop(error: BaseException) -> bool:
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, _NextModelNode):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _is_hitl_request(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("action_requests"), list)


def _gated_ids(calls: Sequence[ToolCall], requests: Sequence[Any]) -> set[str]:
    """The IDs of the calls a middleware request asks about (in order, by name and args)."""
    gated: set[str] = set()
    queue = list(requests)
    for call in calls:
        if queue and queue[0].get("name") == call["name"] and queue[0].get("args") == call["args"]:
            gated.add(call.get("id") or "")
            queue.pop(0)
    return gated


def _per_call_answer(record: AgentToolCall, *, may_edit: bool) -> Callable[[Any], Any]:
    def answer(value: Any) -> Any:
        if (
            isinstance(value, dict)
            and value.get("type") == "tool_approval"
            and value.get("tool_call_id") == record.tool_call_id
        ):
            if record.arguments_edited and may_edit:
                edited = {"name": record.tool_name, "args": json.loads(record.arguments)}
                return {"type": "edit", "edited_action": edited}
            return {"type": "approve"}
        return None

    return answer


def _hitl_answer_message(call: ToolCall, decision: dict[str, Any]) -> ToolMessage | None:
    try:
        from langchain.agents.middleware.human_in_the_loop import _answer_message
    except ImportError:  # pragma: no cover - another langchain version
        return None
    return _answer_message(call, cast(Any, decision))


def _decision(
    call: ToolCall, record: AgentToolCall, allowed: Sequence[str] | None = None
) -> dict[str, Any]:
    """The human-in-the-loop middleware decision a Dex approval record stands for.

    An edit of a tool whose configuration allows no edits is given as an approval (the
    call already ran with the edited arguments; the result says so).
    """
    if record.status is ToolCallStatus.REJECTED:
        decision: dict[str, Any] = {"type": "reject"}
        if record.rejection_message:
            decision["message"] = record.rejection_message
        return decision
    if record.arguments_edited and (allowed is None or "edit" in allowed):
        edited = {"name": call["name"], "args": json.loads(record.arguments)}
        return {"type": "edit", "edited_action": edited}
    return {"type": "approve"}
