"""A LangGraph support-desk agent as a durable session that survives a Worker SIGKILL.

    cd agents/python/langgraph
    uv run python ../../../examples/langgraph_support_desk/run.py

1. starts a private ``dexcli dev`` server and a Worker child serving the agent;
2. a customer asks for a refund; the agent looks the order up (read), then adds a note
   (idempotent write) and asks to refund (needs approval) in parallel;
3. while the refund waits for approval, the Worker is SIGKILLed and replaced;
4. the refund is approved; it runs once and the agent answers;
5. prints the conversation and how often each model and tool call really ran.

Offline with the scripted ``ScriptedChatModel``; set ``OPENAI_API_KEY`` to use
``ChatOpenAI`` instead (the same agent, the same tools).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from agent import FLOW_TYPE, STATE_DIR_ENV, build_flow
from dex_agents import AgentInterrupt, AgentSnapshot, AgentStatus
from dex_agents.testing import (
    MODEL_CALL_KIND,
    AgentTestStack,
    InvocationLog,
    settled_approval,
    tool_call_kind,
    wait_for_agent_snapshot,
)

HERE = Path(__file__).resolve().parent
SESSION_ID = "support-1042"


def idle(snapshot: AgentSnapshot) -> AgentSnapshot | None:
    state = snapshot.state
    if state is None or state.turn_count < 1:
        return None
    return snapshot if state.status is AgentStatus.WAITING_FOR_USER_MESSAGE else None


def pending(snapshot: AgentSnapshot) -> AgentInterrupt | None:
    # Only once the parallel tool calls have finished: killing the Worker while one
    # still runs would (rightly) run that read or idempotent write again.
    return settled_approval(snapshot)


async def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="dex-langgraph-desk-"))
    state = workdir / "state"
    state.mkdir()
    os.environ[STATE_DIR_ENV] = str(state)
    flow = build_flow()
    async with AgentTestStack(
        workdir, [flow], "worker", worker_cwd=HERE, worker_env={STATE_DIR_ENV: str(state)}
    ) as stack:
        print(f"server {stack.server_address}; flow type {FLOW_TYPE}")
        worker = await stack.start_worker()
        sessions = stack.sessions(flow)
        message = "My order 1042 arrived broken. Can I get my money back?"
        print(f"customer: {message}")
        await sessions.start_session(SESSION_ID, message)

        timeout = 120.0 if os.environ.get("OPENAI_API_KEY") else 30.0
        # The Stream is best effort, the snapshot is the truth: poll it.
        first = await wait_for_agent_snapshot(
            sessions,
            SESSION_ID,
            lambda s: pending(s) or idle(s),
            description="an approval or the answer",
            timeout=timeout,
        )
        if isinstance(first, AgentInterrupt):
            print(f"approval needed: {first.tool_name} {first.arguments}")
            print(f"SIGKILL Worker pid {worker.pid} while the session waits")
            worker.kill()
            await stack.start_worker()
            await sessions.resolve_interrupt(SESSION_ID, first.interrupt_id, approved=True)
            print("a support lead approved it")
        snapshot = await wait_for_agent_snapshot(
            sessions, SESSION_ID, idle, description="the answer", timeout=timeout
        )

        print("\nconversation:")
        for stored in snapshot.messages:
            print(f"  {stored.sequence:>2} {stored.role.value:<9} {stored.text}")
        log = InvocationLog(state / "calls.log")
        print("\nreal calls (across both Worker processes):")
        once = True
        kinds = [MODEL_CALL_KIND] + [
            tool_call_kind(t) for t in ("lookup_order", "add_note", "issue_refund")
        ]
        for kind in kinds:
            keys = log.keys(kind)
            print(f"  {kind:<20} ran {len(keys)}x, {len(set(keys))} distinct")
            once = once and len(keys) == len(set(keys))
        print("nothing ran twice" if once else "some call ran more than once")
        return 0 if once else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
