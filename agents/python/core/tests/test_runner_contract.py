"""The guide's runner contract, as written, served by a real Worker.

``tests.my_agent.MyFrameworkRunner`` builds every outcome positionally, in the guide's
order, and reports ``usage=None`` ("not reported") for some model calls.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from pathlib import Path
from typing import Protocol, get_type_hints

from dex_agents import (
    AgentEvent,
    AgentEventType,
    AgentFrameworkRunner,
    AgentSessionClient,
    AgentTurnContext,
    AgentTurnOutcome,
    AgentUsage,
    ContinueTurn,
    DeferredToolExecution,
    FrameworkMessage,
    MessageRole,
    ModelStepOutcome,
    ToolCallStatus,
    ToolExecutionResult,
)
from dex_agents.testing import EXECUTE_COMPLETED_EVENT, AgentTestStack, InvocationLog

from tests.agent_helpers import wait_idle
from tests.my_agent import FINAL_USAGE, LOG_NAME, MyFrameworkRunner, build_agent, build_flow

PACKAGE_DIR = Path(__file__).resolve().parents[1]


# The guide's contract, exactly as it writes it.
class SeedAgentFrameworkRunner(Protocol):
    def build_user_message(self, text: str) -> FrameworkMessage: ...
    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome: ...
    async def execute_deferred_tool_call(
        self, call: DeferredToolExecution
    ) -> ToolExecutionResult: ...


# run_model_step may also return ContinueTurn (beyond the seeds): its outcome type is the
# seeds' AgentTurnOutcome plus that one.
_RETURNS = {"run_model_step": ModelStepOutcome}


def test_the_contract_is_the_guides_protocol() -> None:
    assert set(typing.get_args(ModelStepOutcome)) == {
        *typing.get_args(AgentTurnOutcome),
        ContinueTurn,
    }
    for name in ("build_user_message", "run_model_step", "execute_deferred_tool_call"):
        ours = getattr(AgentFrameworkRunner, name)
        seed = getattr(SeedAgentFrameworkRunner, name)
        assert inspect.iscoroutinefunction(ours) == inspect.iscoroutinefunction(seed), name
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(seed).parameters)
        ours_hints, seed_hints = get_type_hints(ours), get_type_hints(seed)
        assert ours_hints.pop("return") == _RETURNS.get(name, seed_hints["return"]), name
        assert ours_hints == {k: v for k, v in seed_hints.items() if k != "return"}, name
    assert isinstance(MyFrameworkRunner(build_agent()), AgentFrameworkRunner)


async def _events_until_turns_completed(
    sessions: AgentSessionClient, session_id: str, turns: int
) -> list[AgentEvent]:
    events: list[AgentEvent] = []

    async def collect() -> None:
        completed = 0
        async for event in sessions.follow_events(session_id):
            events.append(event)
            if event.type is AgentEventType.TURN_COMPLETED:
                completed += 1
                if completed == turns:
                    return

    await asyncio.wait_for(collect(), timeout=30)
    return events


def _usage_dict(usage: AgentUsage) -> dict[str, int]:
    return {
        "requests": usage.requests,
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
    }


async def test_a_runner_written_from_the_contract_runs_tools_and_reports_usage(
    tmp_path: Path,
) -> None:
    flow = build_flow()
    async with AgentTestStack(
        tmp_path,
        [flow],
        "tests.my_worker",
        worker_cwd=PACKAGE_DIR,
        worker_env={"MY_STATE_DIR": str(tmp_path)},
    ) as stack:
        sessions = stack.sessions(flow)
        await stack.start_worker()
        await sessions.start_session("contract-1", "Find my open tickets")
        snapshot = await wait_idle(sessions, "contract-1", turns=1)

        # The read ran in its own Step, and the model saw its result.
        assert [(m.role, m.text) for m in snapshot.messages] == [
            (MessageRole.USER, "Find my open tickets"),
            (MessageRole.ASSISTANT, 'search_tickets({"user": "me"})'),
            (MessageRole.TOOL, "3 open tickets for me"),
            (
                MessageRole.ASSISTANT,
                f"search_tickets: {ToolCallStatus.SUCCEEDED}: 3 open tickets for me",
            ),
        ]
        log = InvocationLog(tmp_path / LOG_NAME)
        assert log.keys("tool:search_tickets") == ["contract-1/turn-1/call-0-0"]
        executed = [
            e.step_type
            for e in await stack.read_step_history("contract-1")
            if e.event_type == EXECUTE_COMPLETED_EVENT
        ]
        assert executed == ["StartAgentSession", "RunModel", "CallTool", "ResumeTurn", "RunModel"]
        # The tool request reported no usage; only the final answer counts.
        assert snapshot.usage == FINAL_USAGE

        # A turn whose only model call reports nothing leaves the total as it is.
        assert await sessions.send_user_message("contract-1", "answer quietly")
        snapshot = await wait_idle(sessions, "contract-1", turns=2)
        assert snapshot.messages[-1].text == "echo: answer quietly"
        assert snapshot.state is not None and snapshot.state.last_turn_error is None
        assert snapshot.usage == FINAL_USAGE

        # A reported one adds to it again.
        assert await sessions.send_user_message("contract-1", "hello")
        snapshot = await wait_idle(sessions, "contract-1", turns=3)
        assert snapshot.usage == FINAL_USAGE.plus(FINAL_USAGE)
        assert log.count("model") == 4

        events = await _events_until_turns_completed(sessions, "contract-1", 3)
        recorded = [e for e in events if e.type is AgentEventType.USAGE_RECORDED]
        assert [(e.turn_id, e.data["recorded"]) for e in recorded] == [
            ("turn-1", _usage_dict(FINAL_USAGE)),
            ("turn-3", _usage_dict(FINAL_USAGE)),
        ]
        assert recorded[-1].data["session"] == _usage_dict(FINAL_USAGE.plus(FINAL_USAGE))
