"""The agents a run can reach through handoffs, and which of them a turn starts with."""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from agents import Agent, Handoff, RunConfig, RunContextWrapper
from agents.handoffs import handoff as make_handoff


def handoff_of(item: Agent[Any] | Handoff[Any, Any]) -> Handoff[Any, Any]:
    """The ``Handoff`` the SDK builds for an entry of ``agent.handoffs``."""
    return item if isinstance(item, Handoff) else make_handoff(item)


def target_of(item: Agent[Any] | Handoff[Any, Any]) -> Agent[Any] | None:
    """The agent a handoff entry names, or None when the SDK resolves it only when invoked."""
    if isinstance(item, Agent):
        return item
    ref = getattr(item, "_agent_ref", None)
    target = ref() if callable(ref) else None
    return target if isinstance(target, Agent) else None


def agent_graph(root: Agent[Any]) -> list[Agent[Any]]:
    """Every agent reachable from ``root`` through handoffs, breadth first, ``root`` first.

    Raises:
        ValueError: two different agents share a name (the run state names the active
            agent, so the name must pick one), or a handoff's target cannot be resolved
            before it runs.

    """
    found: list[Agent[Any]] = []
    names: dict[str, Agent[Any]] = {}
    queue: deque[Agent[Any]] = deque([root])
    while queue:
        agent = queue.popleft()
        if any(agent is seen for seen in found):
            continue
        other = names.get(agent.name)
        if other is not None:
            raise ValueError(
                f"two different agents are named {agent.name!r}: the run state names the "
                "active agent, so give every agent reachable through handoffs its own name"
            )
        names[agent.name] = agent
        found.append(agent)
        for item in agent.handoffs:
            target = target_of(item)
            if target is None:
                raise ValueError(
                    f"handoff {handoff_of(item).tool_name!r} of agent {agent.name!r} has no "
                    "agent before it runs; build it with agents.handoff(agent, ...)"
                )
            queue.append(target)
    return found


def check_handoffs(agents: Iterable[Agent[Any]], run_config: RunConfig) -> None:
    """Refuse handoffs that rewrite the conversation: the session's history is append-only.

    Raises:
        ValueError: a handoff (or the run config) has an input filter or nests the history.

    """
    if run_config.handoff_input_filter is not None or run_config.nest_handoff_history:
        raise ValueError(
            "RunConfig.handoff_input_filter and nest_handoff_history rewrite the conversation "
            "at a handoff, which a durable session cannot store; leave them unset and let "
            "the receiving agent's instructions say what to look at"
        )
    for agent in agents:
        for item in agent.handoffs:
            handoff = handoff_of(item)
            if handoff.input_filter is not None or handoff.nest_handoff_history:
                raise ValueError(
                    f"handoff {handoff.tool_name!r} of agent {agent.name!r} has an "
                    "input_filter or nest_handoff_history, which rewrite the conversation "
                    "a durable session stores; remove it and let the receiving agent's "
                    "instructions say what to look at"
                )


def clone_graph(
    agents: list[Agent[Any]], copy_agent: Callable[[Agent[Any]], Agent[Any]]
) -> dict[str, Agent[Any]]:
    """Per-step copies of every agent by name, their handoffs pointing at the copies.

    A ``Handoff`` keeps its own ``on_invoke_handoff`` (so ``on_handoff`` callbacks and input
    types work as written); the agent it returns is swapped for that agent's copy.
    """
    copies = {agent.name: copy_agent(agent) for agent in agents}
    for agent in agents:
        copies[agent.name].handoffs = [_rewired(item, copies) for item in agent.handoffs]
    return copies


def _rewired(
    item: Agent[Any] | Handoff[Any, Any], copies: Mapping[str, Agent[Any]]
) -> Agent[Any] | Handoff[Any, Any]:
    if isinstance(item, Agent):
        return copies[item.name]
    invoke = item.on_invoke_handoff

    async def to_copy(context: RunContextWrapper[Any], input_json: str) -> Agent[Any]:
        target = await invoke(context, input_json)
        return copies.get(target.name, target)

    rewired = dataclasses.replace(item, on_invoke_handoff=to_copy)
    target = target_of(item)
    if target is not None:
        rewired._agent_ref = weakref.ref(copies[target.name])
    return rewired


def agent_after(
    start: Agent[Any], agents: Mapping[str, Agent[Any]], items: Iterable[Mapping[str, Any]]
) -> Agent[Any]:
    """The agent active after ``items``: ``start`` moved along each handoff the SDK took.

    A handoff the SDK took shows in the conversation as a ``function_call`` to one of the
    active agent's handoff tools answered by the SDK's transfer message
    (``{"assistant": <name>}``); a handoff the SDK ignored (a second one in a response) is
    answered otherwise.
    """
    active = start
    call_names: dict[str, str] = {}
    for item in items:
        kind = item.get("type")
        if kind == "function_call":
            call_names[str(item.get("call_id"))] = str(item.get("name"))
            continue
        if kind != "function_call_output":
            continue
        name = call_names.get(str(item.get("call_id")))
        tools = {handoff_of(h).tool_name for h in active.handoffs}
        if name not in tools:
            continue
        receiver = _transfer_target(item.get("output"))
        if receiver is not None and receiver in agents:
            active = agents[receiver]
    return active


def _transfer_target(output: object) -> str | None:
    if not isinstance(output, str):
        return None
    try:
        parsed = json.loads(output)
    except ValueError:
        return None
    if isinstance(parsed, dict) and set(parsed) == {"assistant"}:
        name = parsed["assistant"]
        return name if isinstance(name, str) else None
    return None
