"""The support-desk demo: a durable agent session survives Workers SIGKILLed at bad moments.

    uv run python examples/support_desk/run.py [--keep]

1. starts a private ``dexcli dev`` server (SQLite in a temporary folder) and a Worker;
2. starts a session: a customer asks for a refund of a broken order;
3. SIGKILLs the Worker in the middle of the first model call: the next Worker makes the
   call again (a RunModel attempt 2);
4. the model asks for three tool calls, run in parallel: a read, an idempotent write and a
   text message (a write that is not idempotent and runs at most once). The Worker is
   SIGKILLed while all three run: the read runs again, the idempotent write runs again
   with the same idempotency key (the ticket still holds one note), and the text message
   is not sent again: its outcome is ``outcome_unknown``, and the model is told so;
5. the model asks to refund, which waits for a person's approval; the Worker is SIGKILLed
   while the session waits (it holds no Worker), and replaced;
6. a person approves; the refund runs once and the model answers;
7. the conversation, the real call counts and what they mean, and the Step history.

No network and no API key: the model is scripted, everything else is the real engine.
With ``--keep`` the server stays up at the end (Ctrl-C stops it) for ``dexcli``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from agent import FLOW_TYPE, MODEL_GATE, STATE_DIR_ENV, build_flow, tool_gate
from dex_agents import AgentEvent, AgentEventType, AgentSessionClient, AgentSnapshot, AgentStatus
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    MODEL_CALL_KIND,
    AgentTestStack,
    FileGate,
    InvocationLog,
    WorkerHandle,
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
PARALLEL_TOOLS = ("lookup_order", "add_note", "text_customer")
TOOLS = (*PARALLEL_TOOLS, "issue_refund")
# What dexcli dev does with the tasks of a Worker whose connection dropped: it holds them
# this long in case the same process reconnects, then gives them to another Worker.
RECONNECT_GRACE_S = 5
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


def calls_table(log: InvocationLog, state: Path) -> tuple[Table, list[str]]:
    """The real calls, what each count means, and the problems found (none expected)."""
    table = Table(title="Real calls (InvocationLog, across all Workers)", title_justify="left")
    table.add_column("call")
    table.add_column("runs", justify="right")
    table.add_column("keys", justify="right")
    table.add_column("what it means", overflow="fold")
    problems: list[str] = []

    def row(kind: str, runs: int, keys: int, meaning: str, expected: tuple[int, int]) -> None:
        table.add_row(kind, str(runs), str(keys), meaning)
        if (runs, keys) != expected:
            problems.append(f"{kind}: {runs} runs, {keys} keys, expected {expected}")

    model = log.keys(MODEL_CALL_KIND)
    row(
        MODEL_CALL_KIND,
        len(model),
        len(set(model)),
        "the killed model call ran again on the next Worker (RunModel attempt 2); "
        "every other call once",
        (4, 3),
    )
    reads = log.keys(tool_call_kind("lookup_order"))
    row(
        tool_call_kind("lookup_order"),
        len(reads),
        len(set(reads)),
        "a read: retried after the kill",
        (2, 1),
    )
    writes = log.keys(tool_call_kind("add_note"))
    notes = json.loads((state / "ticket-notes.json").read_text())
    row(
        tool_call_kind("add_note"),
        len(writes),
        len(set(writes)),
        f"an idempotent write: run again with the same key {writes[0] if writes else '?'}; "
        f"the ticket holds {len(notes)} note",
        (2, 1),
    )
    if len(notes) != 1:
        problems.append(f"the ticket holds {len(notes)} notes")
    texts = log.keys(tool_call_kind("text_customer"))
    sent = (state / "sms-outbox.jsonl").read_text().splitlines()
    row(
        tool_call_kind("text_customer"),
        len(texts),
        len(set(texts)),
        f"a single-attempt write: killed while running, not run again: outcome_unknown "
        f"({len(sent)} text in the outbox; a person reconciles it)",
        (1, 1),
    )
    refunds = log.keys(tool_call_kind("issue_refund"))
    row(
        tool_call_kind("issue_refund"),
        len(refunds),
        len(set(refunds)),
        "a write that is not idempotent: ran once, after the approval",
        (1, 1),
    )
    return table, problems


async def kill_and_replace(
    stack: AgentTestStack, worker: WorkerHandle, number: int, why: str
) -> WorkerHandle:
    step(f"SIGKILL Worker #{number} (pid {worker.pid}) {why}")
    worker.kill()
    done(f"Worker #{number} is gone")
    replacement = await stack.start_worker()
    done(f"Worker #{number + 1} running (pid {replacement.pid})")
    return replacement


async def demo(keep: bool) -> None:
    workdir = Path(tempfile.mkdtemp(prefix="dex-support-desk-"))
    state = workdir / "state"
    state.mkdir()
    flow = build_flow(state)
    log = InvocationLog(state / "calls.log")
    started = time.monotonic()

    console.rule("Dex support desk: a durable agent session survives killed Workers")
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

        # 1. In the middle of a model call.
        model_gate = FileGate(state, MODEL_GATE)
        await model_gate.wait_until_reached(timeout=60)
        done("the first model call (a RunModel Step) is running")
        worker = await kill_and_replace(stack, worker, 1, "in the middle of the model call")
        model_gate.release()
        console.print(
            f"  [dim]the server holds a dropped Worker's tasks for {RECONNECT_GRACE_S} s in "
            "case it reconnects, then gives them to another Worker[/]"
        )

        # 2. In the middle of three parallel tool calls.
        gates = [FileGate(state, tool_gate(name)) for name in PARALLEL_TOOLS]
        for gate in gates:
            await gate.wait_until_reached(timeout=60)
        done(
            "the model call ran again; its three tool calls run in parallel and are all "
            "in the middle of their work: " + ", ".join(PARALLEL_TOOLS)
        )
        worker = await kill_and_replace(stack, worker, 2, "while the three tool calls run")
        for gate in gates:
            gate.release()

        # 3. While the refund waits for a person.
        interrupt = await wait_for_agent_snapshot(
            sessions,
            SESSION_ID,
            settled_approval,
            description="the refund approval",
            timeout=60,
        )
        await view.caught_up("interrupt_raised")
        step(
            f"The refund waits for a person: interrupt [bold]{interrupt.interrupt_id}[/] "
            f"({interrupt.tool_name} {escape(interrupt.arguments)})"
        )
        done("the session holds no Worker while it waits")
        worker = await kill_and_replace(stack, worker, 3, "while the session waits")

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
            timeout=60,
        )
        # Let the live view catch up with the stored end of the turn.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(printer, timeout=5.0)

        step("The finished conversation (from get_agent_snapshot)")
        console.print(conversation_table(snapshot))
        table, problems = calls_table(log, state)
        console.print(table)
        if problems:
            for problem in problems:
                console.print(f"  [red]✗ {escape(problem)}[/]")
        else:
            done(
                "nothing that must not repeat ran twice: the refund ran once, the text "
                "message at most once (outcome_unknown), the note is stored once"
            )

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
        console.print(f"  {workdir}/worker-*.log   # what each Worker logged")
        console.print("  examples/support_desk/agent.py   # the scripted model and the tools")
        if keep:
            console.print("\n[dim]Server kept running; Ctrl-C stops it.[/]")
        else:
            console.print("  [dim](or rerun with --keep to leave the server running)[/]")
        if keep:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
        if problems:
            sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the server up at the end")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(demo(args.keep))


if __name__ == "__main__":
    main()
