"""The harness pieces that need no server: gates, the log, polling, the scripted runner."""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import replace
from pathlib import Path

import msgspec
import pytest
from dex_agents import (
    AgentEvent,
    AgentEventWriter,
    AgentMessage,
    AgentSessionOptions,
    AgentToolCall,
    AgentTurnContext,
    AgentUsage,
    DeferredToolExecution,
    MessageRole,
    ToolCallsRequested,
    ToolCallStatus,
    ToolEffect,
    ToolExecutionError,
    ToolPolicy,
    TurnCompleted,
)
from dex_agents.testing import (
    MODEL_CALL_KIND,
    FileGate,
    InvocationLog,
    ModelCall,
    ScriptedFailure,
    ScriptedModel,
    ScriptedModelError,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    current_tool_call,
    parse_step_history,
    tool_call_kind,
    wait_until,
)

# --------------------------------------------------------------------------- gates, log, wait


async def test_a_file_gate_blocks_until_released_and_then_lets_everyone_through(
    tmp_path: Path,
) -> None:
    gate = FileGate(tmp_path, "g")
    waiter = asyncio.create_task(gate.pass_through())
    await gate.wait_until_reached(timeout=5)
    assert gate.is_reached() and not waiter.done()
    gate.release()
    await asyncio.wait_for(waiter, 5)
    await asyncio.wait_for(gate.pass_through(), 5)  # released: no wait
    assert gate.reached_count() == 2
    with pytest.raises(TimeoutError):
        await FileGate(tmp_path, "other").wait_until_reached(timeout=0.05)
    with pytest.raises(ValueError):
        FileGate(tmp_path, "a/b")


async def test_a_file_gate_is_marked_after_what_its_task_queued_before_it_ran(
    tmp_path: Path,
) -> None:
    """A Worker's frames queued before a gate (a flush scheduled on the loop) go out first."""
    gate = FileGate(tmp_path, "g")
    reached_when_flushed: list[bool] = []

    async def handler() -> None:
        # what queuing a frame does: the Worker's flush runs at the loop's next pass
        asyncio.get_running_loop().call_soon(lambda: reached_when_flushed.append(gate.is_reached()))
        await gate.pass_through()

    task = asyncio.create_task(handler())
    await gate.wait_until_reached(timeout=5)
    assert reached_when_flushed == [False]
    gate.release()
    await asyncio.wait_for(task, 5)


def test_the_invocation_log_counts_by_kind_and_key_across_threads(tmp_path: Path) -> None:
    log = InvocationLog(tmp_path / "sub" / "calls.log")
    assert log.entries() == []

    def record(n: int) -> None:
        for _ in range(50):
            log.record("tool:x", f"key-{n % 2}")

    threads = [threading.Thread(target=record, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    log.record("model", "m", "attempt=1")
    assert log.count("tool:x") == 200
    assert log.count("tool:x", "key-1") == 100
    assert log.keys("model") == ["m"]
    assert log.entries()[-1].detail == "attempt=1"


async def test_wait_until_returns_the_value_or_times_out_naming_what() -> None:
    values = iter([None, 0, "ready"])
    assert await wait_until("a value", lambda: next(values), timeout=5) == "ready"

    async def never() -> bool:
        return False

    with pytest.raises(TimeoutError, match="the impossible"):
        await wait_until("the impossible", never, timeout=0.05)


def test_step_history_is_projected_from_dexcli_json() -> None:
    document = {
        "flowId": "f",
        "runId": "r",
        "events": [
            {"eventId": "1", "type": "FlowStarted", "payload": {}},
            {
                "eventId": "2",
                "type": "StepExecuteCompleted",
                "payload": {
                    "context": {
                        "stepType": "RunModel",
                        "stepExecutionId": "RunModel-1",
                        "finalAttempt": 2,
                    }
                },
            },
            {"eventId": "3", "type": "RpcExecutionCompleted", "payload": {"rpcName": "x"}},
        ],
    }
    [entry] = parse_step_history(document)
    assert (entry.event_type, entry.step_type, entry.step_execution_id, entry.final_attempt) == (
        "StepExecuteCompleted",
        "RunModel",
        "RunModel-1",
        2,
    )


# --------------------------------------------------------------------------- scripted runner

OPTIONS = AgentSessionOptions(tool_policies={"read": ToolPolicy(ToolEffect.READ)})


def user(sequence: int, text: str, turn_id: str = "turn-1") -> AgentMessage:
    return AgentMessage(
        sequence=sequence,
        turn_id=turn_id,
        role=MessageRole.USER,
        framework_item={"type": "user", "text": text},
        text=text,
    )


async def no_heartbeat() -> None:
    return None


def turn_context(
    events: list[AgentEvent],
    *,
    run_state: str | None = None,
    records: dict[str, AgentToolCall] | None = None,
    attempt: int = 1,
) -> AgentTurnContext:
    writer = AgentEventWriter(
        events.append, turn_id="turn-1", step_execution_id="RunModel-1", attempt=attempt
    )
    return AgentTurnContext(
        flow_id="s",
        turn_id="turn-1",
        attempt=attempt,
        messages=[user(1, "look it up")],
        framework_run_state=run_state,
        tool_calls=records or {},
        events=writer,
        heartbeat=no_heartbeat,
        options=OPTIONS,
    )


def final_record(call_id: str, output: str) -> AgentToolCall:
    return AgentToolCall(
        tool_call_id=call_id,
        turn_id="turn-1",
        tool_name="read",
        arguments='{"n": 1}',
        effect=ToolEffect.READ,
        requires_approval=False,
        deferral_order=0,
        status=ToolCallStatus.SUCCEEDED,
        idempotency_key=f"s/turn-1/{call_id}",
        output=output,
    )


async def test_the_scripted_runner_defers_tools_and_resumes_from_records(tmp_path: Path) -> None:
    seen: list[ModelCall] = []

    def answer(call: ModelCall) -> ScriptedText:
        seen.append(call)
        result = call.result_of("read")
        return ScriptedText(text=f"got {result.content if result else None}")

    model = ScriptedModel(
        [
            [
                ScriptedToolCalls(calls=[ScriptedToolCall(tool_name="read", arguments={"n": 1})]),
                answer,
            ]
        ]
    )
    log = InvocationLog(tmp_path / "calls.log")
    runner = ScriptedRunner(model, {}, log=log)
    events: list[AgentEvent] = []

    first = await runner.run_model_step(turn_context(events))
    assert isinstance(first, ToolCallsRequested)
    [deferred] = first.tool_calls
    assert (deferred.tool_call_id, deferred.tool_name, json.loads(deferred.arguments)) == (
        "call-0-0",
        "read",
        {"n": 1},
    )
    assert deferred.policy == ToolPolicy(ToolEffect.READ)
    assert first.usage is not None and first.usage.requests == 1

    records = {"call-0-0": final_record("call-0-0", "42")}
    second = await runner.run_model_step(
        turn_context(events, run_state=first.framework_run_state, records=records)
    )
    assert isinstance(second, TurnCompleted)
    assert [(m.role, m.text) for m in second.new_messages] == [
        (MessageRole.ASSISTANT, 'read({"n": 1})'),
        (MessageRole.TOOL, "42"),
        (MessageRole.ASSISTANT, "got 42"),
    ]
    assert seen[0].call_index == 1 and seen[0].user_text == "look it up"
    assert log.keys(MODEL_CALL_KIND) == ["s/turn-1/0", "s/turn-1/1"]


async def test_scripted_usage_is_derived_given_or_not_reported() -> None:
    given = AgentUsage(requests=1, input_tokens=7, output_tokens=3, total_tokens=10)
    call = ScriptedToolCall(tool_name="read", arguments={"n": 1})
    model = ScriptedModel(
        [
            [ScriptedText(text="derived")],
            [ScriptedText(text="given", usage=given)],
            [ScriptedText(text="silent", usage=None)],
            [ScriptedToolCalls(calls=[call], usage=None)],
        ]
    )
    runner = ScriptedRunner(model)
    outcomes = []
    for number in (1, 2, 3, 4):
        context = replace(turn_context([]), turn_id=f"turn-{number}")
        outcomes.append(await runner.run_model_step(context))
    derived, explicit, silent, requested = outcomes
    assert derived.usage is not None and derived.usage.requests == 1
    assert derived.usage.output_tokens == len("derived") // 4 + 1
    assert explicit.usage == given
    assert silent.usage is None
    assert isinstance(requested, ToolCallsRequested) and requested.usage is None


async def test_scripted_failures_raise_after_streaming_part_of_the_answer() -> None:
    runner = ScriptedRunner(
        ScriptedModel([[ScriptedText(text="abcd", fail_attempts=1)], [ScriptedFailure()]])
    )
    events: list[AgentEvent] = []
    context = turn_context(events, attempt=1)
    with pytest.raises(ScriptedModelError):
        await runner.run_model_step(context)
    context.events.close()
    assert [e.data["text"] for e in events] == ["ab"]
    outcome = await runner.run_model_step(turn_context(events, attempt=2))
    assert isinstance(outcome, TurnCompleted)


async def test_scripted_tools_see_their_idempotency_key_and_may_fail(tmp_path: Path) -> None:
    def read(n: int) -> dict[str, object]:
        return {"n": n, "key": current_tool_call().idempotency_key}

    async def broken() -> str:
        raise ToolExecutionError("nope")

    log = InvocationLog(tmp_path / "calls.log")
    runner = ScriptedRunner(ScriptedModel(), {"read": read, "broken": broken}, log=log)
    events: list[AgentEvent] = []
    writer = AgentEventWriter(
        events.append, turn_id="turn-1", step_execution_id="CallTool-1", attempt=2
    )
    record = final_record("c1", "")
    execution = DeferredToolExecution(
        flow_id="s",
        tool_call=record,
        idempotency_key="s/turn-1/c1",
        attempt=2,
        events=writer,
        heartbeat=no_heartbeat,
    )
    result = await runner.execute_deferred_tool_call(execution)
    assert json.loads(result.output) == {"key": "s/turn-1/c1", "n": 1}
    assert log.keys(tool_call_kind("read")) == ["s/turn-1/c1"]

    broken_call = DeferredToolExecution(
        flow_id="s",
        tool_call=msgspec.structs.replace(record, tool_name="broken", arguments=""),
        idempotency_key="s/turn-1/c1",
        attempt=1,
        events=writer,
        heartbeat=no_heartbeat,
    )
    with pytest.raises(ToolExecutionError, match="nope"):
        await runner.execute_deferred_tool_call(broken_call)


def test_the_exported_names_are_pinned() -> None:
    import dex_agents.testing as testing

    assert sorted(testing.__all__) == [
        "AgentTestStack",
        "DERIVE_USAGE",
        "EXECUTE_COMPLETED_EVENT",
        "FileGate",
        "InvocationLog",
        "InvocationRecord",
        "MODEL_CALL_KIND",
        "ModelCall",
        "ScriptedContinue",
        "ScriptedFailure",
        "ScriptedModel",
        "ScriptedModelError",
        "ScriptedResponse",
        "ScriptedRunner",
        "ScriptedStep",
        "ScriptedText",
        "ScriptedTool",
        "ScriptedToolCall",
        "ScriptedToolCalls",
        "ScriptedToolContext",
        "ScriptedToolResult",
        "ScriptedUsage",
        "SnapshotSource",
        "StepHistoryEntry",
        "WorkerHandle",
        "current_tool_call",
        "find_dexcli",
        "parse_step_history",
        "read_step_history",
        "run_agent_worker",
        "settled_approval",
        "tool_call_kind",
        "wait_for_agent_snapshot",
        "wait_until",
    ]
    assert all(hasattr(testing, name) for name in testing.__all__)
    assert testing.EXECUTE_COMPLETED_EVENT == "StepExecuteCompleted"


def test_settled_approval_waits_for_the_other_tool_calls() -> None:
    from dex_agents import AgentInterrupt, AgentSnapshot
    from dex_agents.testing import settled_approval

    def call(call_id: str, status: ToolCallStatus) -> AgentToolCall:
        return msgspec.structs.replace(final_record(call_id, "ok"), status=status)

    interrupt = AgentInterrupt(
        interrupt_id="turn-1/refund",
        tool_call_id="refund",
        turn_id="turn-1",
        tool_name="issue_refund",
        arguments="{}",
        created_at=0.0,
    )
    running = AgentSnapshot(
        session_id="s",
        state=None,
        pending_interrupts=[interrupt],
        tool_calls=[
            call("refund", ToolCallStatus.AWAITING_APPROVAL),
            call("note", ToolCallStatus.PENDING),
        ],
    )
    settled = msgspec.structs.replace(
        running,
        tool_calls=[
            call("refund", ToolCallStatus.AWAITING_APPROVAL),
            call("note", ToolCallStatus.SUCCEEDED),
        ],
    )
    assert settled_approval(running) is None
    assert settled_approval(settled) == interrupt
    assert settled_approval(msgspec.structs.replace(settled, pending_interrupts=[])) is None
