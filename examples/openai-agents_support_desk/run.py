"""The support desk on the OpenAI Agents SDK: a durable session survives a Worker SIGKILL.

    cd agents/python/openai-agents
    uv run python ../../../examples/openai-agents_support_desk/run.py [--offline]

1. starts a private ``dexcli dev`` server (SQLite in a temporary folder) and a Worker;
2. a customer asks for a refund of a broken order;
3. the agent looks the order up (read), then adds a note (idempotent write) and asks to
   refund (a write that needs approval) in parallel;
4. while the refund waits for approval, the Worker is SIGKILLed and replaced;
5. a person approves; the refund runs once and the agent answers;
6. the conversation and the call counts are printed.

Offline (no key, or ``--offline``) the model is the scripted ``FakeModel``. With
``OPENAI_API_KEY`` set it is a real OpenAI model (``--model``, default gpt-4.1-mini).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from agent import FAKE, FLOW_TYPE, MODEL_ENV, STATE_DIR_ENV, build_flow  # noqa: E402
from dex_agents import AgentInterrupt, AgentSnapshot, AgentStatus  # noqa: E402
from dex_agents.testing import (  # noqa: E402
    AgentTestStack,
    InvocationLog,
    settled_approval,
    wait_for_agent_snapshot,
)

SESSION_ID = "support-1042"


def say(text: str) -> None:
    print(f"> {text}", flush=True)


def pending(snapshot: AgentSnapshot) -> AgentInterrupt | None:
    # Only once the parallel tool calls have finished: killing the Worker while one
    # still runs would (rightly) run that read or idempotent write again.
    return settled_approval(snapshot)


def idle(snapshot: AgentSnapshot) -> AgentSnapshot | None:
    state = snapshot.state
    if state is not None and state.turn_count >= 1:
        if state.status is AgentStatus.WAITING_FOR_USER_MESSAGE and not state.active_turn_id:
            return snapshot
    return None


async def demo(timeout: float) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="dex-openai-desk-"))
    state = workdir / "state"
    state.mkdir()
    os.environ[STATE_DIR_ENV] = str(state)
    flow = build_flow()
    async with AgentTestStack(workdir, [flow], "worker", worker_cwd=HERE) as stack:
        say(f"server at {stack.server_address}; model: {os.environ[MODEL_ENV]}")
        worker = await stack.start_worker()
        sessions = stack.sessions(flow)
        message = "My order 1042 arrived broken. Can I get my money back?"
        say(f"customer: {message}")
        await sessions.start_session(SESSION_ID, message)

        interrupt = await wait_for_agent_snapshot(
            sessions, SESSION_ID, pending, description="the refund approval", timeout=timeout
        )
        say(f"approval needed: {interrupt.tool_name} {interrupt.arguments}")
        say(f"SIGKILL Worker pid {worker.pid} while the session waits")
        worker.kill()
        await stack.start_worker()
        say("a support lead approves on a new Worker")
        await sessions.resolve_interrupt(SESSION_ID, interrupt.interrupt_id, approved=True)

        snapshot = await wait_for_agent_snapshot(
            sessions, SESSION_ID, idle, description="the end of the turn", timeout=timeout
        )
        say("conversation:")
        for m in snapshot.messages:
            print(f"  {m.sequence:>2} {m.role.value:<9} {m.text[:110]}")
        log = InvocationLog(state / "calls.log")
        counts = {
            kind: log.count(kind)
            for kind in ("tool:lookup_order", "tool:add_note", "tool:issue_refund")
        }
        say(f"real tool runs: {counts}; usage: {snapshot.usage}")
        say(f"flow type {FLOW_TYPE}; data in {stack.data_dir}")
        return 0 if counts["tool:issue_refund"] == 1 else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--offline", action="store_true", help="use the scripted FakeModel")
    parser.add_argument("--model", default="gpt-4.1-mini", help="the OpenAI model when live")
    args = parser.parse_args()
    live = bool(os.environ.get("OPENAI_API_KEY")) and not args.offline
    os.environ[MODEL_ENV] = args.model if live else FAKE
    sys.exit(asyncio.run(demo(timeout=120.0 if live else 30.0)))


if __name__ == "__main__":
    main()
