# tests/test_approvals.py: the test process builds the same Flow for its Client.
from pathlib import Path

from dex_agents import AgentStatus, ToolCallStatus
from dex_agents.testing import (
    EXECUTE_COMPLETED_EVENT,
    AgentTestStack,
    InvocationLog,
    wait_for_agent_snapshot,
)

from tests.my_agent import LOG_NAME, build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]


async def test_write_survives_a_worker_kill(tmp_path: Path) -> None:
    flow = build_flow()
    async with AgentTestStack(
        tmp_path,
        [flow],
        "tests.my_worker",
        worker_cwd=PACKAGE_DIR,
        worker_env={"MY_STATE_DIR": str(tmp_path)},
    ) as stack:
        sessions = stack.sessions(flow)
        worker = await stack.start_worker()
        await sessions.start_session("session-1", "refund order 7")
        interrupt = await wait_for_agent_snapshot(
            sessions,
            "session-1",
            lambda snapshot: next(iter(snapshot.pending_interrupts), None),
            description="a pending approval",
        )
        worker.kill()  # SIGKILL while the session waits
        await stack.start_worker()  # replacement Worker
        assert await sessions.resolve_interrupt("session-1", interrupt.interrupt_id, approved=True)
        history = await stack.read_step_history("session-1")
        executed = [
            entry.step_type for entry in history if entry.event_type == EXECUTE_COMPLETED_EVENT
        ]

        # Beyond the sample: the approved refund ran exactly once, on the replacement.
        done = await wait_for_agent_snapshot(
            sessions,
            "session-1",
            lambda s: (
                s
                if s.state
                and s.state.status is AgentStatus.WAITING_FOR_USER_MESSAGE
                and s.state.turn_count == 1
                else None
            ),
            description="the refund turn completed",
        )
        assert done.pending_interrupts == []
        assert (
            done.messages[-1].text == f"issue_refund: {ToolCallStatus.SUCCEEDED}: refunded order 7"
        )
        log = InvocationLog(tmp_path / LOG_NAME)
        assert log.count("tool:issue_refund") == 1
        history = await stack.read_step_history("session-1")
        executed = [
            entry.step_type for entry in history if entry.event_type == EXECUTE_COMPLETED_EVENT
        ]
        assert executed.count("AwaitToolApproval") == 1
        assert executed.count("CallSingleAttemptTool") == 1
        assert executed[-1] == "RunModel"
