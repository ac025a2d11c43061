"""The support-desk demo: a durable agent session survives a Worker SIGKILL mid-approval.

    uv run python examples/support_desk/run.py [--keep]

1. starts a private ``dexcli dev`` server (SQLite in a temporary folder) and a Worker;
2. starts a session: a customer asks for a refund of a broken order;
3. the scripted model looks the order up (read tool), then adds a note (idempotent write)
   and asks to refund (a write that needs approval) in parallel;
4. while the refund waits for approval, the Worker is SIGKILLed and replaced;
5. a person approves; the refund runs once and the model answers;
6. the conversation, the call counts (nothing ran twice) and the Step history are shown.

No network and no API key: the model is scripted, everything else is the real engine.
With ``--keep`` the server stays up at the end (Ctrl-C stops it) for ``dexcli``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from agent import FLOW_TYPE, STATE_DIR_ENV, build_flow
from dex_agents import AgentEvent, AgentEventType, AgentSessionClient, AgentSnapshot, AgentStatus
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    MODEL_CALL_KIND,
    AgentTestStack,
    InvocationLog,
    find_dexcli,
    settled_approval,
    tool_call_kind,
    wait_for_agent_snapshot,
)
from rich.console import Console
from rich.markup import escape
from rich.table import Table

HERE = Path(__file__).resolve().parent
SESSION_ID = "support-1042"
console = Console(highlight=False)


def step(text: str) -> None:
    console.print(f"\n[bold cyan]>[/] {text}")


def done(text: str) -> None:
    console.print(f"  [green]✓[/] {text}")


def show_event(event: AgentEvent) -> None:
    data = event.data
    kind = event.type
    where = f"[dim]{event.step_execution_id}#{event.attempt}[/]"
    if kind is AgentEventType.TEXT_DELTA:
        console.print(f"  [magenta]model[/] {escape(str(data.get('text', '')))}  {where}")
    elif kind is AgentEventType.TOOL_CALL_DEFERRED:
        approval = " (needs approval)" if data.get("requires_approval") else ""
        console.print(
            f"  [yellow]tool call[/] {data.get('tool_name')} "
            f"{escape('[' + str(data.get('effect')) + ']')}{approval}"
        )
    elif kind is AgentEventType.TOOL_CALL_STARTED:
        console.print(f"  [yellow]running[/] {data.get('tool_name')}  {where}")
    elif kind is AgentEventType.TOOL_CALL_FINISHED:
        console.print(f"  [yellow]finished[/] {data.get('tool_name')}: {data.get('status')}")
    elif kind is AgentEventType.INTERRUPT_RAISED:
        console.print(f"  [red]approval needed[/] for {data.get('tool_name')}")
    elif kind is AgentEventType.INTERRUPT_RESOLVED:
        verdict = "approved" if data.get("approved") else "rejected"
        console.print(f"  [red]approval[/] {verdict}")
    elif kind in (AgentEventType.TURN_STARTED, AgentEventType.TURN_COMPLETED):
        console.print(f"  [blue]{kind.value}[/] {event.turn_id}")


class LiveView:
    """Prints the session's events as they arrive and remembers which ones it saw."""

    def __init__(self, sessions: AgentSessionClient) -> None:
        self.sessions = sessions
        self.seen: set[str] = set()
        self.changed = asyncio.Event()

    async def run(self) -> None:
        """Print events until the first turn completes."""
        # Best effort, like every Stream: the snapshot is the source of truth.
        events: AsyncIterator[AgentEvent] = self.sessions.follow_events(SESSION_ID)
        async for event in events:
            show_event(event)
            self.seen.add(event.type.value)
            if event.type is AgentEventType.TOOL_CALL_FINISHED:
                self.seen.add(f"finished:{event.data.get('tool_name')}")
            self.changed.set()
            self.changed = asyncio.Event()
            if event.type is AgentEventType.TURN_COMPLETED:
                return

    async def caught_up(self, *names: str, timeout: float = 5.0) -> None:
        """Wait until the view printed events ``names`` (or ``timeout`` passed)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while not set(names) <= self.seen:
                    await self.changed.wait()


def conversation_table(snapshot: AgentSnapshot) -> Table:
    table = Table(title=f"Conversation of session {SESSION_ID}", title_justify="left")
    table.add_column("#", justify="right")
    table.add_column("role")
    table.add_column("text", overflow="fold")
    for message in snapshot.messages:
        table.add_row(str(message.sequence), message.role.value, message.text)
    return table


def calls_table(log: InvocationLog) -> tuple[Table, bool]:
    table = Table(title="Real calls (InvocationLog, across both Workers)", title_justify="left")
    table.add_column("call")
    table.add_column("times run", justify="right")
    table.add_column("distinct keys", justify="right")
    once = True
    kinds = [MODEL_CALL_KIND] + [
        tool_call_kind(t) for t in ("lookup_order", "add_note", "issue_refund")
    ]
    for kind in kinds:
        keys = log.keys(kind)
        table.add_row(kind, str(len(keys)), str(len(set(keys))))
        once = once and len(keys) == len(set(keys))
    return table, once


async def demo(keep: bool) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="dex-support-desk-"))
    state = workdir / "state"
    state.mkdir()
    flow = build_flow(state)
    log = InvocationLog(state / "calls.log")
    started = time.monotonic()

    console.rule("Dex support desk: a durable agent session survives a killed Worker")
    step("Starting a private Dex server ([bold]dexcli dev[/]) on a fresh SQLite store")
    async with AgentTestStack(
        workdir, [flow], "worker", worker_cwd=HERE, worker_env={STATE_DIR_ENV: str(state)}
    ) as stack:
        done(f"server at {stack.server_address}, data in {stack.data_dir}")
        worker = await stack.start_worker()
        done(f"Worker #1 running (pid {worker.pid}), serving flow type {FLOW_TYPE}")

        sessions = stack.sessions(flow)
        step(f"Customer opens session [bold]{SESSION_ID}[/]")
        message = "My order 1042 arrived broken. Can I get my money back?"
        console.print(f"  [bold]customer[/] {message}")
        await sessions.start_session(SESSION_ID, message)
        view = LiveView(sessions)
        printer = asyncio.create_task(view.run())

        interrupt = await wait_for_agent_snapshot(
            sessions,
            SESSION_ID,
            # Once the parallel tool calls finished too: killing the Worker while the
            # idempotent write still runs would (rightly) run it again.
            settled_approval,
            description="the refund approval",
        )
        await view.caught_up("interrupt_raised", "finished:add_note")
        step(
            f"The refund waits for a person: interrupt [bold]{interrupt.interrupt_id}[/] "
            f"({interrupt.tool_name} {escape(interrupt.arguments)})"
        )
        done("the session holds no Worker while it waits")

        step(f"SIGKILL Worker #1 (pid {worker.pid}) while the session waits")
        worker.kill()
        done("Worker #1 is gone")
        replacement = await stack.start_worker()
        done(f"Worker #2 running (pid {replacement.pid})")

        step("A support lead approves the refund")
        approved = await sessions.resolve_interrupt(
            SESSION_ID, interrupt.interrupt_id, approved=True
        )
        done(f"resolve_interrupt -> {approved}")

        snapshot = await wait_for_agent_snapshot(
            sessions,
            SESSION_ID,
            lambda s: (
                s
                if s.state is not None
                and s.state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
                and s.state.turn_count >= 1
                else None
            ),
            description="the end of the turn",
        )
        # Let the live view catch up with the stored end of the turn.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(printer, timeout=5.0)

        step("The finished conversation (from get_agent_snapshot)")
        console.print(conversation_table(snapshot))
        table, once = calls_table(log)
        console.print(table)
        if once:
            done("nothing ran twice: every model and tool call ran exactly once")
        else:
            console.print("  [red]✗ some call ran more than once[/]")

        history = await stack.read_step_history(SESSION_ID)
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        step("Steps of the session (dexcli flow history)")
        console.print("  " + " → ".join(executed))
        done(f"finished in {time.monotonic() - started:.1f}s")

        dexcli = find_dexcli()
        step("Where to look next")
        if keep:
            prefix = f"{dexcli} --server {stack.server_address}"
            console.print(f"  http://{stack.server_address}/ui   # Dex Web, in a browser")
        else:
            console.print(f"  {dexcli} dev --data-dir {stack.data_dir} --port 8801   # restart it")
            console.print("  http://127.0.0.1:8801/ui   # then open Dex Web in a browser")
            prefix = f"{dexcli}"
        console.print(f"  {prefix} flow history {SESSION_ID}")
        console.print(f"  {prefix} flow show {SESSION_ID}")
        console.print(f"  {prefix} flow list")
        console.print("  examples/support_desk/agent.py   # the scripted model and the tools")
        if keep:
            console.print("\n[dim]Server kept running; Ctrl-C stops it.[/]")
        else:
            console.print("  [dim](or rerun with --keep to leave the server running)[/]")
        if keep:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
        if not once:
            sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the server up at the end")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(demo(args.keep))


if __name__ == "__main__":
    main()
