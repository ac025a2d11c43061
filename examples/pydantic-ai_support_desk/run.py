"""A Pydantic AI support-desk agent as a durable session that survives a Worker SIGKILL.

    cd agents/python/pydantic-ai
    uv run python ../../../examples/pydantic-ai_support_desk/run.py

1. starts a private ``dexcli dev`` server and a Worker child serving the agent;
2. a customer asks for a refund; the agent looks the order up (read), then adds a note
   (idempotent write) and asks to refund (needs approval) in parallel;
3. while the refund waits for approval, the Worker is SIGKILLed and replaced;
4. the refund is approved; it runs once and the agent answers;
5. prints the conversation and how often each tool really ran.

Offline with the scripted ``FakeModel``; set ``OPENAI_API_KEY`` or ``ANTHROPIC_API_KEY``
to use a real model (the same agent, the same tools).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from agent import FLOW_TYPE, STATE_DIR_ENV, build_flow
from dex_agents import AgentSnapshot, MessageRole
from dex_agents.testing import AgentTestStack, InvocationLog, settled_approval, wait_until

HERE = Path(__file__).resolve().parent
SESSION_ID = "support-1042"


async def main() -> int:
    workdir = Path(tempfile.mkdtemp(prefix="dex-pydantic-ai-desk-"))
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

        killed = False

        async def answered() -> AgentSnapshot | None:
            nonlocal killed, worker
            snapshot = await sessions.get_agent_snapshot(SESSION_ID)
            if snapshot.pending_interrupts and settled_approval(snapshot) is None:
                return None  # a parallel tool call still runs: kill only once it finished
            for interrupt in snapshot.pending_interrupts:
                if not killed:
                    print(f"approval needed: {interrupt.tool_name} {interrupt.arguments}")
                    print(f"SIGKILL Worker pid {worker.pid}; starting a replacement")
                    worker.kill()
                    worker = await stack.start_worker()
                    killed = True
                print(f"approving {interrupt.tool_name}")
                await sessions.resolve_interrupt(SESSION_ID, interrupt.interrupt_id, approved=True)
            state_now = snapshot.state
            if state_now is None or state_now.active_turn_id is not None:
                return None
            done = snapshot.messages and snapshot.messages[-1].role is MessageRole.ASSISTANT
            return snapshot if done else None

        snapshot = await wait_until("the agent's answer", answered, timeout=180, interval=0.1)
        print("\nconversation:")
        for stored in snapshot.messages:
            print(f"  {stored.sequence:>2} {stored.role.value:<9} {stored.text}")
        log = InvocationLog(state / "calls.log")
        print("\nreal tool runs (across both Workers):")
        twice = False
        for name in ("lookup_order", "add_note", "issue_refund"):
            keys = log.keys(f"tool:{name}")
            twice = twice or len(keys) != len(set(keys))
            print(f"  {name:<13} {len(keys)}")
        print(f"\nusage: {snapshot.usage}")
        print(f"state kept in {workdir}")
        return 1 if twice else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
