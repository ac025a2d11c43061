"""Agent sessions on an embedded server: a SIGKILL inside a tool Step, then a restart.

A child process runs an ``EmbeddedServer`` on a SQLite file with the agent Worker
in-process (``tests.embedded_agent_app``); the test talks to it over HTTP with an
``AgentSessionClient``, kills the whole process inside a tool, starts it again on the same
file and checks that the turn finishes with no completed Step run again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from dex import AsyncClient, ClientOptions, Registry
from dex_agents import AgentEvent, AgentEventType, AgentSessionClient, AgentSessionFlow
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    MODEL_CALL_KIND,
    FileGate,
    InvocationLog,
    read_step_history,
    tool_call_kind,
)

from tests.agent_defs import SCENARIOS_ENV, STATE_DIR_ENV, build_flow
from tests.agent_helpers import assistant_texts, wait_idle

PACKAGE_DIR = Path(__file__).resolve().parents[1]
SCENARIO = "gated"  # every tool passes a gate named after it


class App:
    """The embedded application child: started, killed and started again on one file."""

    def __init__(self, tmp_path: Path, state_dir: Path) -> None:
        self.database = tmp_path / "app.sqlite3"
        self.ready_file = tmp_path / "app.ready"
        self.log_path = tmp_path / "app.log"
        self.env = {
            **os.environ,
            SCENARIOS_ENV: SCENARIO,
            STATE_DIR_ENV: str(state_dir),
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(PACKAGE_DIR), os.environ.get("PYTHONPATH", "")) if p
            ),
        }
        self.process: subprocess.Popen[bytes] | None = None

    async def start(self) -> str:
        """Start the child; its HTTP address once its Worker registered."""
        self.ready_file.unlink(missing_ok=True)
        args = [sys.executable, "-m", "tests.embedded_agent_app"]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [*args, str(self.database), str(self.ready_file)],
                cwd=PACKAGE_DIR,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 60
        while not self.ready_file.exists():
            assert self.process.poll() is None, self.log_path.read_text()
            assert time.monotonic() < deadline, f"no ready file:\n{self.log_path.read_text()}"
            await asyncio.sleep(0.02)
        return self.ready_file.read_text().strip()

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        assert self.process.returncode == -signal.SIGKILL

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@asynccontextmanager
async def sessions_at(address: str, flow: AgentSessionFlow) -> AsyncIterator[AgentSessionClient]:
    registry = Registry([flow], allow_async_handlers=True)
    options = ClientOptions(server_address=address, timeout=30.0)
    async with AsyncClient(registry, None, options) as client:
        yield AgentSessionClient(client, flow)


async def events_until(sessions: AgentSessionClient, session_id: str, turn_id: str) -> list[str]:
    """``"<turn> <event type>"`` from the oldest retained event to ``turn_id``'s completion."""
    events: list[AgentEvent] = []

    async def collect() -> None:
        async for event in sessions.follow_events(session_id):
            events.append(event)
            if event.turn_id == turn_id and event.type is AgentEventType.TURN_COMPLETED:
                return

    await asyncio.wait_for(collect(), timeout=30)
    return [f"{event.turn_id} {event.type.value}" for event in events]


async def test_a_kill_inside_a_tool_and_a_restart_finish_the_turn_without_repeating_a_step(
    tmp_path: Path,
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    flow = build_flow(SCENARIO, state_dir)
    log = InvocationLog(state_dir / "calls.log")
    FileGate(state_dir, "lookup_order").release()  # turn 1's read runs straight through
    note_gate = FileGate(state_dir, "add_note")
    session_id = "embedded-crash"
    app = App(tmp_path, state_dir)
    try:
        async with sessions_at(await app.start(), flow) as sessions:
            await sessions.start_session(session_id, "look up order 7")
            await wait_idle(sessions, session_id, turns=1)
            assert await sessions.send_user_message(session_id, "add a note to order 7")
            await note_gate.wait_until_reached()
        # inside the note's tool Step: turn 1 and turn 2's first model call are committed
        app.kill()
        note_gate.release()

        address = await app.start()
        async with sessions_at(address, flow) as sessions:
            snapshot = await wait_idle(sessions, session_id, turns=2)
            kinds = await events_until(sessions, session_id, "turn-2")
            page = await sessions.list_agent_messages(session_id)  # an RPC: the Worker answers

        key = f"{session_id}/turn-2/call-0-0"
        assert assistant_texts(snapshot)[-1] == (
            f"add_note#call-0-0: succeeded: note added to order 7 with key {key}"
        )
        assert snapshot.state is not None and snapshot.state.last_turn_error is None
        # the idempotent write ran again, with the same key; nothing that finished did
        assert log.keys(tool_call_kind("add_note")) == [key, key]
        assert log.count(tool_call_kind("lookup_order")) == 1
        for turn in ("turn-1", "turn-2"):
            for call in (0, 1):
                assert log.count(MODEL_CALL_KIND, f"{session_id}/{turn}/{call}") == 1

        history = await read_step_history(address, session_id)
        executed = [e.step_type for e in history if e.event_type == EXECUTE_COMPLETED_EVENT]
        assert executed.count("RunModel") == 4
        # one result per tool Step; the killed attempt left no event (the server died with
        # it, so the redelivered attempt is numbered 1 again, unlike a lone Worker's crash)
        tools = [(e.event_type, e.step_type) for e in history if e.step_type.startswith("Call")]
        assert tools == [(EXECUTE_COMPLETED_EVENT, "CallTool")] * 2, tools

        # on SQLite the Stream lives in server memory: after the restart it holds only what
        # the resumed turn wrote; both turns stay readable from the committed messages
        assert {kind.split()[0] for kind in kinds} == {"turn-2"}, kinds
        assert "turn-2 tool_call_finished" in kinds, kinds
        assert kinds[-1] == "turn-2 turn_completed", kinds
        texts = assistant_texts(snapshot)
        assert texts[0] == "Let me check."
        assert texts[1].startswith("lookup_order#call-0-0: succeeded: ")
        assert [m.sequence for m in page.messages] == [m.sequence for m in snapshot.messages]
    finally:
        app.stop()
