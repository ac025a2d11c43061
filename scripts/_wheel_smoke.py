"""Run one durable agent session from installed wheels, outside the repository.

``python3 scripts/dev.py test`` copies this file into an empty temporary folder and runs it
with the Python of a fresh virtual environment that holds only the built wheels (and their
dependencies from PyPI). It checks, printing one line per step:

1. ``dex``, ``dex_server`` and ``dex_agents`` are imported from that environment;
2. ``dex_agents.testing.find_dexcli`` finds the ``dexcli`` next to ``sys.executable``, and
   honours env ``DEXCLI``;
3. ``dexcli dev`` from the environment starts on a fresh SQLite store (its migrations come
   from the wheel);
4. an ``AsyncWorker`` built with no options (the address from env ``DEX_SERVER_ADDRESS``)
   serves an agent session with a scripted model and one read tool; the session's answer
   and its Step history (read by ``dexcli flow history``) are as expected;
5. with ``--pydantic-ai``, the same Worker also serves a Pydantic AI ``Agent`` (the
   adapter's offline ``FakeModel``) through ``dex-agents-pydantic-ai``, and one session of
   it answers.

Exits non-zero on the first failed check.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dex
import dex_agents
import dex_server
from dex import AsyncClient, AsyncWorker, Registry
from dex_agents import (
    AgentSessionClient,
    AgentSessionFlow,
    AgentSessionOptions,
    AgentStatus,
    MessageRole,
    ToolEffect,
    ToolPolicy,
)
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    ModelCall,
    ScriptedModel,
    ScriptedResponse,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    find_dexcli,
    read_step_history,
    wait_for_agent_snapshot,
)

HERE = Path.cwd()


def say(text: str) -> None:
    print(f"[wheels] {text}", flush=True)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"[wheels] FAILED: {what}")
    say(f"ok: {what}")


def lookup_order(order_id: int) -> dict[str, object]:
    return {"order_id": order_id, "status": "shipped"}


def ask(call: ModelCall) -> ScriptedResponse:
    return ScriptedToolCalls(
        text="Looking it up.",
        calls=[ScriptedToolCall(tool_name="lookup_order", arguments={"order_id": 7})],
    )


def answer(call: ModelCall) -> ScriptedResponse:
    found = call.result_of("lookup_order")
    return ScriptedText(text=f"Order 7: {found.content if found else 'not found'}")


def build_flow() -> AgentSessionFlow:
    runner = ScriptedRunner(ScriptedModel([[ask, answer]]), {"lookup_order": lookup_order})
    policies = {"lookup_order": ToolPolicy(ToolEffect.READ)}
    return AgentSessionFlow(
        runner, flow_type="WheelAgent", options=AgentSessionOptions(tool_policies=policies)
    )


def pydantic_ai_flow() -> AgentSessionFlow:
    # Only the wheel check's environment has the adapter; the repository's root one not.
    from dex_agents_pydantic_ai import (  # type: ignore[import-not-found, unused-ignore]
        FakeModel,
        FakeReply,
        FakeToolCall,
        PydanticAIRunner,
    )
    from pydantic_ai import Agent  # type: ignore[import-not-found, unused-ignore]

    def script(call: Any) -> Any:
        if call.call_index == 0:
            return FakeReply(
                text="Looking it up.",
                tool_calls=[FakeToolCall(tool_name="lookup_order", arguments={"order_id": 7})],
            )
        found = call.result_of("lookup_order")
        return f"Order 7: {found.model_response_str() if found else 'not found'}"

    agent = Agent(FakeModel(script))
    agent.tool_plain(lookup_order)
    policies = {"lookup_order": ToolPolicy(ToolEffect.READ)}
    flow: AgentSessionFlow = AgentSessionFlow(
        PydanticAIRunner(agent),
        flow_type="WheelPydanticAiAgent",
        options=AgentSessionOptions(tool_policies=policies),
    )
    return flow


async def one_session(sessions: AgentSessionClient, session_id: str) -> list[str]:
    await sessions.start_session(session_id, "Where is order 7?")
    snapshot = await wait_for_agent_snapshot(
        sessions,
        session_id,
        lambda s: (
            s
            if s.state is not None
            and s.state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
            and s.state.turn_count >= 1
            else None
        ),
        description=f"the end of the first turn of {session_id}",
        timeout=60,
    )
    return [m.text for m in snapshot.messages if m.role is MessageRole.ASSISTANT]


def check_imports() -> None:
    prefix = Path(sys.prefix).resolve()
    for module in (dex, dex_server, dex_agents):
        where = Path(module.__file__ or "").resolve()
        check(prefix in where.parents, f"{module.__name__} is imported from {where.parent}")


def check_find_dexcli() -> Path:
    os.environ.pop("DEXCLI", None)
    found = find_dexcli()
    check(found == Path(sys.executable).parent / "dexcli", f"find_dexcli() -> {found}")
    os.environ["DEXCLI"] = str(found.resolve())
    check(find_dexcli() == found.resolve(), "find_dexcli() honours env DEXCLI")
    os.environ["DEXCLI"] = str(HERE / "no-such-dexcli")
    try:
        find_dexcli()
    except FileNotFoundError as exc:
        check("DEXCLI" in str(exc), "a missing DEXCLI is a FileNotFoundError naming DEXCLI")
    else:
        check(False, "a missing DEXCLI raises")
    os.environ.pop("DEXCLI")
    return found


def start_server(dexcli: Path) -> tuple[subprocess.Popen[bytes], str]:
    address_file = HERE / "address"
    log = (HERE / "dexcli-dev.log").open("wb")
    server = subprocess.Popen(
        [str(dexcli), "dev", "--data-dir", str(HERE / "data"), "--port", "0"]
        + ["--address-file", str(address_file)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while not address_file.exists() or not address_file.read_text().strip():
        if server.poll() is not None or time.monotonic() > deadline:
            print((HERE / "dexcli-dev.log").read_text(errors="replace"))
            raise SystemExit("[wheels] FAILED: dexcli dev did not start")
        time.sleep(0.05)
    address = address_file.read_text().strip()
    check(True, f"dexcli dev listens on {address}")
    return server, address


async def run_session(address: str, with_pydantic_ai: bool) -> None:
    os.environ["DEX_SERVER_ADDRESS"] = address
    flow = build_flow()
    flows = [flow, pydantic_ai_flow()] if with_pydantic_ai else [flow]
    registry = Registry(flows, allow_async_handlers=True)
    worker = AsyncWorker(registry)  # no options: the address comes from DEX_SERVER_ADDRESS
    serving = asyncio.create_task(worker.start())
    await worker.wait_pull_registered(30)
    check(True, "an AsyncWorker with default options registered")
    client = AsyncClient(registry)
    try:
        replies = await one_session(AgentSessionClient(client, flow), "wheel-1")
        check(bool(replies) and "shipped" in replies[-1], f"the agent answered {replies[-1]!r}")
        history = await read_step_history(address, "wheel-1")
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        check("CallTool" in executed, "dexcli flow history lists " + " -> ".join(executed))
        if with_pydantic_ai:
            replies = await one_session(AgentSessionClient(client, flows[1]), "wheel-pydantic-1")
            check(
                bool(replies) and "shipped" in replies[-1],
                f"the Pydantic AI agent answered {replies[-1]!r}",
            )
    finally:
        await client.close()
        await worker.stop()
        await serving


def main() -> None:
    started = time.monotonic()
    check_imports()
    dexcli = check_find_dexcli()
    server, address = start_server(dexcli)
    try:
        asyncio.run(run_session(address, "--pydantic-ai" in sys.argv[1:]))
    finally:
        server.terminate()
        server.wait(30)
    say(f"agent session from the wheels passed in {time.monotonic() - started:.1f}s")


if __name__ == "__main__":
    main()
