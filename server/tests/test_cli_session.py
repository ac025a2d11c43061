"""``dexcli session`` end to end: a real ``dexcli dev`` server, a real Worker child serving a
scripted agent session (no network), and the CLI's ``main`` run in a thread.

The scripted model asks for ``issue_refund`` (a non-idempotent write, so it waits for
approval) when a message says "refund", and echoes anything else.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from dex_agents import AgentSessionClient, AgentSessionFlow, AgentSnapshot, AgentStatus
from dex_agents.testing import (
    AgentTestStack,
    InvocationLog,
    WorkerHandle,
    tool_call_kind,
    wait_for_agent_snapshot,
    wait_until,
)

from tests._cli_agent import BREAKER, FAILURE_TEXT, build_flows
from tests._web_agent import STATE_DIR_ENV
from tests.test_cli import Result, dexcli_cmd, run_cli, run_cli_process

SERVER_DIR = Path(__file__).resolve().parents[1]

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]


class Desk:
    def __init__(self, stack: AgentTestStack, state_dir: Path) -> None:
        self.stack = stack
        flow = stack.flows[0]
        assert isinstance(flow, AgentSessionFlow)
        self.sessions: AgentSessionClient = stack.sessions(flow)
        self.log = InvocationLog(state_dir / "calls.log")
        self.worker: WorkerHandle | None = None

    async def cli(self, *args: str) -> Result:
        # main() runs its own event loop: give it a thread
        return await asyncio.to_thread(run_cli, "--server", self.stack.server_address, *args)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desk(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Desk]:
    tmp = tmp_path_factory.mktemp("cli-session")
    state_dir = tmp / "state"
    state_dir.mkdir()
    async with AgentTestStack(
        tmp,
        build_flows(state_dir),
        "tests._cli_agent",
        worker_cwd=SERVER_DIR,
        worker_env={STATE_DIR_ENV: str(state_dir)},
    ) as stack:
        d = Desk(stack, state_dir)
        d.worker = await stack.start_worker()
        yield d


def _idle(turns: int) -> Callable[[AgentSnapshot], AgentSnapshot | None]:
    def probe(s: AgentSnapshot) -> AgentSnapshot | None:
        st = s.state
        ok = (
            st is not None
            and st.turn_count >= turns
            and st.status is AgentStatus.WAITING_FOR_USER_MESSAGE
            and s.queued_message_count == 0
        )
        return s if ok else None

    return probe


async def _wait_idle(desk: Desk, sid: str, turns: int) -> AgentSnapshot:
    return await wait_for_agent_snapshot(
        desk.sessions, sid, _idle(turns), description=f"{sid} idle after {turns} turn(s)"
    )


async def _wait_approval(desk: Desk, sid: str) -> str:
    snapshot = await wait_for_agent_snapshot(
        desk.sessions,
        sid,
        lambda s: s if s.pending_interrupts else None,
        description=f"an approval in {sid}",
    )
    return snapshot.pending_interrupts[0].interrupt_id


async def _poll(what: str, probe: Callable[[], Awaitable[bool]], timeout: float = 20.0) -> None:
    await wait_until(what, probe, timeout)


def _error(result: Result) -> dict[str, Any]:
    error: dict[str, Any] = json.loads(result.err)["error"]
    return error


# --------------------------------------------------------------------------- list


async def test_list_filters_awaiting_approval(desk: Desk) -> None:
    await desk.sessions.start_session("ls-refund", "refund order 7")
    await desk.sessions.start_session("ls-hello", "hello")
    await desk.stack.client.start_flow(BREAKER, "ls-breaker", "x")
    await _wait_approval(desk, "ls-refund")
    await _wait_idle(desk, "ls-hello", 1)

    waiting = await desk.cli("session", "list", "--status", "awaiting-approval", "-o", "json")
    assert waiting.code == 0, waiting.err
    rows = {s["sessionId"]: s for s in waiting.json()["sessions"]}
    assert "ls-refund" in rows and "ls-hello" not in rows
    assert rows["ls-refund"]["pendingApprovals"] == 1
    assert rows["ls-refund"]["flowType"] == "WebDesk"
    assert rows["ls-refund"]["startedAt"].endswith("Z")

    idle = await desk.cli("session", "list", "--status", "waiting-for-message", "-o", "json")
    ids = {s["sessionId"] for s in idle.json()["sessions"]}
    assert "ls-hello" in ids and "ls-refund" not in ids

    everything = await desk.cli("-o", "json", "session", "list")
    ids = {s["sessionId"] for s in everything.json()["sessions"]}
    assert {"ls-refund", "ls-hello"} <= ids
    assert "ls-breaker" not in ids  # not an agent session

    table = await desk.cli("session", "list", "--status", "active")
    assert table.code == 0, table.err
    line = next(ln for ln in table.out.splitlines() if "ls-refund" in ln)
    assert "awaiting-approval" in line and "WebDesk" in line

    bad = await desk.cli("session", "list", "--status", "sleeping")
    assert bad.code == 2 and "awaiting-approval" in bad.err


# --------------------------------------------------------------------------- show, no Worker


async def test_show_and_refused_action_without_a_worker(desk: Desk) -> None:
    sid = "show-noworker"
    await desk.sessions.start_session(sid, "please refund order 7")
    interrupt = await _wait_approval(desk, sid)
    assert desk.worker is not None
    desk.worker.kill()
    try:
        shown = await desk.cli("session", "show", sid, "-o", "json")
        assert shown.code == 0, shown.err
        doc = shown.json()
        assert doc["status"] == "awaiting-approval"
        (approval,) = doc["pendingApprovals"]
        assert approval["interruptId"] == interrupt
        assert approval["toolName"] == "issue_refund"
        assert approval["effect"] == "non_idempotent_write"
        assert json.loads(approval["arguments"]) == {"order_id": 7, "amount": 30}
        assert [m["text"] for m in doc["messages"] if m["role"] == "user"] == [
            "please refund order 7"
        ]
        (call,) = doc["toolCalls"]
        assert call["status"] == "awaiting_approval" and call["toolName"] == "issue_refund"
        assert set(doc["usage"]) >= {"requests", "inputTokens", "outputTokens", "totalTokens"}

        table = await desk.cli("session", "show", sid)
        assert table.code == 0, table.err
        assert "Pending approvals" in table.out and interrupt in table.out
        assert f"dexcli session approve {sid} {interrupt}" in table.out
        assert "please refund order 7" in table.out

        # an action needs a Worker: say so, change nothing, exit 5
        async def refused() -> bool:
            r = await desk.cli(
                "-o", "json", "session", "approve", sid, interrupt, "--rpc-timeout", "1"
            )
            return r.code == 5 and _error(r)["code"] == "NO_WORKER_AVAILABLE"

        await _poll("the CLI to report no Worker", refused)
        last = await desk.cli("session", "approve", sid, interrupt, "--rpc-timeout", "1")
        assert "no Worker serves Flow type 'WebDesk'" in last.err
        assert "nothing changed" in last.err
        again = await desk.cli("-o", "json", "session", "show", sid)
        assert [p["interruptId"] for p in again.json()["pendingApprovals"]] == [interrupt]
    finally:
        desk.worker = await desk.stack.start_worker()
    # with a Worker back, the same command answers it
    done = await desk.cli("-o", "json", "session", "approve", sid, interrupt)
    assert done.code == 0, done.err
    assert done.json() == {
        "sessionId": sid,
        "interruptId": interrupt,
        "approved": True,
        "reason": None,
    }
    await _wait_idle(desk, sid, 1)


# --------------------------------------------------------------------------- approve / reject


async def test_approve_runs_the_write_once(desk: Desk) -> None:
    sid = "cli-approve"
    await desk.sessions.start_session(sid, "refund order 7 please")
    interrupt = await _wait_approval(desk, sid)
    approved = await desk.cli("session", "approve", sid, interrupt)
    assert approved.code == 0, approved.err
    assert approved.out.strip() == f"{interrupt} approved"
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("refunded 30 on order 7" in m.text for m in snapshot.messages)
    mine = [k for k in desk.log.keys(tool_call_kind("issue_refund")) if k.startswith(sid + "/")]
    assert len(mine) == 1

    twice = await desk.cli("-o", "json", "session", "approve", sid, interrupt)
    assert twice.code == 3 and _error(twice)["code"] == "INTERRUPT_NOT_PENDING"
    shown = await desk.cli("-o", "json", "session", "show", sid)
    assert any("refunded 30 on order 7" in m["text"] for m in shown.json()["messages"])


async def test_reject_with_a_reason_reaches_the_model(desk: Desk) -> None:
    sid = "cli-reject"
    await desk.sessions.start_session(sid, "refund order 7 now")
    interrupt = await _wait_approval(desk, sid)
    reason = "amount exceeds the refund limit"
    rejected = await desk.cli("session", "reject", sid, interrupt, "--reason", reason)
    assert rejected.code == 0, rejected.err
    assert rejected.out.strip() == f"{interrupt} rejected ({reason})"
    snapshot = await _wait_idle(desk, sid, 1)
    assert any(reason in m.text for m in snapshot.messages)
    assert not [k for k in desk.log.keys(tool_call_kind("issue_refund")) if k.startswith(sid)]


async def test_unknown_interrupt_and_session(desk: Desk) -> None:
    sid = "cli-unknown-interrupt"
    await desk.sessions.start_session(sid, "hello")
    await _wait_idle(desk, sid, 1)
    nope = await desk.cli("-o", "json", "session", "approve", sid, "int-nope")
    assert nope.code == 3 and _error(nope)["code"] == "INTERRUPT_NOT_PENDING"
    assert "pending: none" in _error(nope)["message"]
    missing = await desk.cli("-o", "json", "session", "show", "no-such-session")
    assert missing.code == 3 and _error(missing)["code"] == "FLOW_NOT_FOUND"
    await desk.stack.client.start_flow(BREAKER, "not-a-session", "y")
    other = await desk.cli("-o", "json", "session", "show", "not-a-session")
    assert other.code == 3 and _error(other)["code"] == "NOT_A_SESSION"


# --------------------------------------------------------------------------- send, steer, cancel


async def test_send_steer_and_cancel(desk: Desk) -> None:
    sid = "cli-send"
    await desk.sessions.start_session(sid, "hello")
    await _wait_idle(desk, sid, 1)
    sent = await desk.cli("session", "send", sid, "second question")
    assert sent.code == 0, sent.err
    assert sent.out.startswith("message queued")
    snapshot = await _wait_idle(desk, sid, 2)
    assert any(m.text == "echo: second question" for m in snapshot.messages)

    blank = await desk.cli("session", "send", sid, "   ")
    assert blank.code == 2

    # with no turn running, a steer starts the next turn with its text
    steered = await desk.cli("-o", "json", "session", "steer", sid, "third, steered")
    assert steered.code == 0, steered.err
    assert steered.json()["steered"] is True
    snapshot = await _wait_idle(desk, sid, 3)
    assert any(m.text == "echo: third, steered" for m in snapshot.messages)

    idle = await desk.cli("-o", "json", "session", "cancel", sid)
    assert idle.code == 0, idle.err
    assert idle.json() == {"sessionId": sid, "cancelled": False}

    # a turn waiting for approval is cancelled, and its approval with it
    await desk.sessions.send_user_message(sid, "refund order 7")
    await _wait_approval(desk, sid)
    cancelled = await desk.cli("-o", "json", "session", "cancel", sid)
    assert cancelled.code == 0, cancelled.err
    assert cancelled.json()["cancelled"] is True
    snapshot = await _wait_idle(desk, sid, 4)
    assert snapshot.pending_interrupts == []

    stopped = await desk.cli("session", "stop", sid, "--yes", "--reason", "done here")
    assert stopped.code == 0, stopped.err
    await _poll(
        "the session to close",
        lambda: _status_is(desk, sid, "canceled"),
    )
    closed = await desk.cli("-o", "json", "session", "send", sid, "anyone?")
    assert closed.code == 1 and _error(closed)["code"] == "FLOW_NOT_ACTIVE"


async def _status_is(desk: Desk, sid: str, status: str) -> bool:
    shown = await desk.cli("-o", "json", "session", "show", sid)
    return shown.code == 0 and shown.json()["status"] == status


# --------------------------------------------------------------------------- events


async def test_events_follow_until_the_turn_ends(desk: Desk) -> None:
    sid = "cli-events"
    await desk.sessions.start_session(sid)
    await _poll("the session to start", lambda: _status_is(desk, sid, "waiting-for-message"))
    follow = asyncio.create_task(
        asyncio.to_thread(
            run_cli_process,
            "--server",
            desk.stack.server_address,
            "session",
            "events",
            sid,
            "--follow",
            "--until-turn-end",
            "--stop-after",
            "60",
            "-o",
            "json",
            timeout=90,
        )
    )
    # the follower starts at the oldest retained event, so it sees the turn whenever it
    # begins polling
    sent = await desk.cli("session", "send", sid, "hello events")
    assert sent.code == 0, sent.err
    result = await follow
    assert result.code == 0, result.err
    events = [json.loads(line) for line in result.out.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "turn_started" and types[-1] == "turn_completed"
    assert {e["turnId"] for e in events} == {"turn-1"}
    assert all({"stepExecutionId", "attempt", "resumeToken"} <= set(e) for e in events)
    text = "".join(e["data"].get("text", "") for e in events if e["type"] == "text_delta")
    assert "echo: hello events" in text

    # without --follow: the retained events, grouped, and a token to resume after them
    listed = await desk.cli("-o", "json", "session", "events", sid)
    doc = listed.json()
    assert [e["type"] for e in doc["events"]] == types
    assert any("echo: hello events" in g["text"] for g in doc["groups"])
    after = await desk.cli(
        "-o", "json", "session", "events", sid, "--resume-token", doc["resumeToken"]
    )
    assert after.json()["events"] == []
    table = await desk.cli("session", "events", sid)
    assert "turn_completed" in table.out and "resume with: --resume-token" in table.out


# --------------------------------------------------------------------------- history details


async def test_history_shows_the_failure_and_rfc3339_times(desk: Desk) -> None:
    await desk.stack.client.start_flow(BREAKER, "cli-breaker", "entry-42")
    result = await desk.stack.client.wait_for_flow("cli-breaker", timeout=30.0)
    assert result.status.value == "failed"
    # piped, with a narrow terminal announced: rows stay whole, one line each
    proc = await asyncio.to_thread(
        subprocess.run,
        [*dexcli_cmd(), "flow", "history", "cli-breaker", "--server", desk.stack.server_address],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "40"},
    )
    table = Result(proc.returncode, proc.stdout, proc.stderr)
    assert table.code == 0, table.err
    failed = [ln for ln in table.out.splitlines() if "StepExecuteFailed" in ln]
    assert len(failed) == 1 and FAILURE_TEXT in failed[0] and "ValueError" in failed[0]
    closed = [ln for ln in table.out.splitlines() if "FlowClosed" in ln]
    assert len(closed) == 1 and "failed" in closed[0]

    doc = (await desk.cli("flow", "history", "cli-breaker", "-o", "json")).json()
    step = next(e for e in doc["events"] if e["type"] == "StepExecuteFailed")
    started = step["payload"]["context"]["startedTime"]
    assert isinstance(started, str) and started.endswith("Z")
    assert time.time() - _unix(started) < 600
    assert step["payload"]["output"]["failure"]["errorType"] == "ValueError"


def _unix(rfc3339: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()


async def test_approve_with_edited_arguments(desk: Desk) -> None:
    sid = "cli-edit"
    await desk.sessions.start_session(sid, "refund order 7 please")
    interrupt = await _wait_approval(desk, sid)
    bad = await desk.cli("session", "approve", sid, interrupt, "--arguments", "[1]")
    assert bad.code != 0 and "JSON object" in bad.err
    edited = '{"order_id": 7, "amount": 12}'
    done = await desk.cli(
        "-o", "json", "session", "approve", sid, interrupt, "--arguments", edited,
        "--approver", "carol",
    )  # fmt: skip
    assert done.code == 0, done.err
    assert done.json()["arguments"] == {"order_id": 7, "amount": 12}
    assert done.json()["approver"] == "carol"
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("refunded 12 on order 7" in m.text for m in snapshot.messages)


async def test_reconcile_needs_a_note(desk: Desk) -> None:
    blank = await desk.cli("session", "reconcile", "any-session", "call-1", "--note", " ")
    assert blank.code != 0 and "--note is blank" in blank.err
    await desk.sessions.start_session("cli-reconcile", "hello")
    await _wait_idle(desk, "cli-reconcile", 1)
    none = await desk.cli(
        "-o", "json", "session", "reconcile", "cli-reconcile", "call-1", "--note", "checked"
    )
    assert none.code == 3
    assert _error(none)["code"] == "TOOL_CALL_NOT_AWAITING_RECONCILIATION"


# --------------------------------------------------------------------------- questions


async def test_answer_a_tool_question_resumes_the_call(desk: Desk) -> None:
    sid = "cli-question"
    await desk.sessions.start_session(sid, "book a visit please")
    interrupt = await _wait_approval(desk, sid)
    shown = await desk.cli("-o", "json", "session", "show", sid)
    (pending,) = shown.json()["pendingApprovals"]
    assert pending["kind"] == "question"
    assert pending["question"]["message"] == "Which day suits the visit?"
    assert pending["question"]["requestedSchema"]["required"] == ["day"]
    table = await desk.cli("session", "show", sid)
    assert "Which day suits the visit? [fields: day]" in table.out
    assert f"dexcli session answer {sid} {interrupt} --json" in table.out

    both = await desk.cli("session", "answer", sid, interrupt, "--json", "{}", "--decline")
    assert both.code != 0 and "exactly one of" in both.err
    bad = await desk.cli("session", "answer", sid, interrupt, "--json", "[1]")
    assert bad.code != 0 and "JSON object" in bad.err
    done = await desk.cli(
        "-o", "json", "session", "answer", sid, interrupt, "--json", '{"day": "2026-12-09"}'
    )
    assert done.code == 0, done.err
    assert done.json() == {
        "sessionId": sid,
        "interruptId": interrupt,
        "answered": True,
        "answer": {"day": "2026-12-09"},
    }
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("visit booked at depot on 2026-12-09" in m.text for m in snapshot.messages)
    again = await desk.cli("-o", "json", "session", "answer", sid, interrupt, "--decline")
    assert again.code == 3 and _error(again)["code"] == "INTERRUPT_NOT_PENDING"


async def test_decline_a_tool_question_and_approve_is_not_an_answer(desk: Desk) -> None:
    sid = "cli-question-decline"
    await desk.sessions.start_session(sid, "book a visit soon")
    interrupt = await _wait_approval(desk, sid)
    declined = await desk.cli("session", "answer", sid, interrupt, "--decline")
    assert declined.code == 0, declined.err
    assert declined.out.strip() == f"{interrupt} declined"
    snapshot = await _wait_idle(desk, sid, 1)
    assert any("no visit booked at depot: the person declined" in m.text for m in snapshot.messages)

    await desk.sessions.start_session("cli-question-not", "refund order 7 please")
    refund = await _wait_approval(desk, "cli-question-not")
    wrong = await desk.cli(
        "-o", "json", "session", "answer", "cli-question-not", refund, "--decline"
    )
    assert wrong.code == 3 and "no pending question" in _error(wrong)["message"]
