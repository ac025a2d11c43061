"""LangGraph ``interrupt()`` and ``Command`` results <-> durable questions and tool outputs.

A LangGraph interrupt stops the graph and waits for ``Command(resume=value)``; the node
that called ``interrupt()`` then runs again from its start, and ``interrupt()`` returns
the value. Durably, the question becomes a Dex ``question`` interrupt (it may be answered
days later, on another Worker), and its answer is the resume value.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from typing import Any, TypedDict, cast

from dex_agents import ToolExecutionError, ToolInputAnswer, ToolInputRequired, ToolQuestion
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, Interrupt

from dex_agents_langgraph._items import RunStateError

# A graph interrupt outside any tool is deferred as a call with this name and an ID that
# starts with this prefix; its "tool Step" asks the question.
INTERRUPT_TOOL_NAME = "interrupt"
INTERRUPT_CALL_PREFIX = "interrupt-"
COMMAND_FORMAT = "dex-langgraph-command/1"
DECLINED_ERROR = "The person declined to answer the question this tool asked."
_ANY_OBJECT: dict[str, Any] = {"type": "object"}


def question_for(value: Any, key: str, response_schema: Any = None) -> ToolQuestion:
    """The Dex question an ``interrupt(value)`` asks.

    The message is a text value itself, else a dict's ``question``, ``message`` or
    ``query`` entry, else the value as JSON. The form is the interrupt's
    ``response_schema`` when it is a JSON Schema object, else any object.
    """
    message: str
    if isinstance(value, str):
        message = value
    elif isinstance(value, dict) and any(
        isinstance(value.get(k), str) for k in ("question", "message", "query")
    ):
        message = next(value[k] for k in ("question", "message", "query") if k in value)
    else:
        message = json.dumps(value, default=str)
    schema = response_schema if isinstance(response_schema, dict) else _ANY_OBJECT
    return ToolQuestion(key=key, message=message, requested_schema=schema)


def resume_value(answer: ToolInputAnswer) -> Any:
    """The value ``interrupt()`` returns for an accepted answer: the answer's object."""
    if answer.action != "accept":
        raise ToolExecutionError(DECLINED_ERROR)
    return answer.content if answer.content is not None else {}


def interrupt_arguments(value: Any) -> str:
    """The deferred call's arguments for a graph interrupt: its value as JSON."""
    return json.dumps(value, default=str)


# --------------------------------------------------------------------------- tool runs


class _ToolRun(TypedDict):
    out: Any


async def run_in_tool_node(
    node: ToolNode,
    tool_call: dict[str, Any],
    state: dict[str, Any],
    answers: Sequence[ToolInputAnswer],
    *,
    config: dict[str, Any],
    context: Any,
    auto: Callable[[Any], Any] | None = None,
) -> list[ToolMessage | Command[Any]]:
    """Run one call through the graph's own ``ToolNode`` inside a one-node graph.

    The ``ToolNode`` injects ``InjectedState`` / ``ToolRuntime`` arguments from ``state``
    and applies the agent's ``wrap_tool_call`` middleware; the one-node graph gives
    ``interrupt()`` the run it needs. Each recorded answer resumes the next interrupt in
    order; an interrupt with no answer left raises ``ToolInputRequired``. ``auto`` answers
    the interrupts it returns a value for (a decision the session already made) without
    using a recorded answer.
    """

    async def call_tool(_: _ToolRun, config: RunnableConfig) -> dict[str, Any]:
        payload = {"__type": "tool_call_with_context", "tool_call": tool_call, "state": state}
        return {"out": await node.ainvoke(payload, config)}

    builder = StateGraph(_ToolRun)
    builder.add_node("tool", cast(Any, call_tool))
    builder.add_edge(START, "tool")
    # With answers, stop before the tool so that each answer resumes one run of it, as
    # ``Command(resume=...)`` does in LangGraph: the tool does not run an extra time. An
    # automatic answer needs to see its interrupt first, so then the tool runs from START.
    ahead = bool(answers) and auto is None
    graph = builder.compile(
        checkpointer=InMemorySaver(), interrupt_before=["tool"] if ahead else None
    )
    run_config: Any = {
        **config,
        "configurable": {**config.get("configurable", {}), "thread_id": "tool"},
    }
    result = await graph.ainvoke({"out": None}, run_config, context=context)
    left = list(answers)
    if ahead:
        while left:
            value = resume_value(left.pop(0))
            result = await graph.ainvoke(Command(resume=value), run_config, context=context)
            if "__interrupt__" not in result:
                break
    while "__interrupt__" in result:
        first: Interrupt = list(result["__interrupt__"])[0]
        automatic = auto(first.value) if auto is not None else None
        if automatic is not None:
            value = automatic
        elif left:
            value = resume_value(left.pop(0))
        else:
            key = f"interrupt-{len(answers) + 1}"
            raise ToolInputRequired(question_for(first.value, key, first.response_schema))
        result = await graph.ainvoke(Command(resume=value), run_config, context=context)
    return _outputs(result["out"])


def _outputs(out: Any) -> list[ToolMessage | Command[Any]]:
    if isinstance(out, dict):
        return [m for m in out.get("messages", []) if isinstance(m, ToolMessage)] or [
            Command(update=out)
        ]
    if isinstance(out, list):
        return [o for o in out if isinstance(o, (ToolMessage, Command))]
    if isinstance(out, (ToolMessage, Command)):
        return [out]
    raise RuntimeError(f"the tool node returned {type(out).__name__}, not tool messages")


def command_text(outputs: Sequence[ToolMessage | Command[Any]], tool_call_id: str) -> str:
    """The text of the tool message that answers the call, for display."""
    for output in outputs:
        messages: list[Any] = [output]
        if isinstance(output, Command) and isinstance(output.update, dict):
            messages = list(output.update.get("messages") or [])
        for message in messages:
            if isinstance(message, ToolMessage) and message.tool_call_id == tool_call_id:
                return str(message.text)
    return ""


def encode_commands(
    text: str, outputs: Sequence[ToolMessage | Command[Any]], serde: SerializerProtocol
) -> str:
    """A tool output that carries the ``Command`` results for the next model step."""
    kind, data = serde.dumps_typed(list(outputs))
    return json.dumps(
        {
            "format": COMMAND_FORMAT,
            "text": text,
            "serde": kind,
            "data": base64.b64encode(data).decode("ascii"),
        },
        separators=(",", ":"),
    )


def decode_commands(output: str | None, serde: SerializerProtocol) -> list[Any] | None:
    """The results :func:`encode_commands` stored, or None for a plain output."""
    if not output or not output.startswith('{"format":"' + COMMAND_FORMAT):
        return None
    try:
        raw = json.loads(output)
        return list(serde.loads_typed((raw["serde"], base64.b64decode(raw["data"]))))
    except (ValueError, KeyError, TypeError) as error:
        raise RunStateError(f"cannot decode a tool's Command result: {error}") from error


def find_tool_node(nodes: dict[str, ToolNode], tool: BaseTool) -> ToolNode | None:
    """The graph's ``ToolNode`` that holds ``tool``, or None for an extra tool."""
    for node in nodes.values():
        if node.tools_by_name.get(tool.name) is tool:
            return node
    return None
