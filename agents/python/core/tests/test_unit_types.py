from __future__ import annotations

import asyncio
from datetime import timedelta

import msgspec
import pytest
from dex_agents import (
    AgentEventWriter,
    AgentSessionOptions,
    AgentState,
    AgentStatus,
    AgentToolCall,
    AgentTurnContext,
    AgentUsage,
    ToolCallStatus,
    ToolEffect,
    ToolPolicy,
    is_approval_required,
)


def test_default_approval_follows_the_effect() -> None:
    assert not is_approval_required(ToolPolicy(ToolEffect.READ))
    assert not is_approval_required(ToolPolicy(ToolEffect.IDEMPOTENT_WRITE))
    assert is_approval_required(ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE))
    assert is_approval_required(ToolPolicy(ToolEffect.UNCLASSIFIED))
    assert is_approval_required(ToolPolicy(ToolEffect.READ, requires_approval=True))
    assert not is_approval_required(ToolPolicy(ToolEffect.UNCLASSIFIED, requires_approval=False))


def test_policy_resolution_order() -> None:
    options = AgentSessionOptions(
        tool_policies={"search": ToolPolicy(ToolEffect.READ)},
        default_tool_effect=ToolEffect.NON_IDEMPOTENT_WRITE,
    )
    # explicit policy wins over framework metadata
    assert options.resolve_tool_policy("search", ToolEffect.UNCLASSIFIED).effect is ToolEffect.READ
    # framework metadata wins over the default
    resolved = options.resolve_tool_policy("note", ToolEffect.IDEMPOTENT_WRITE)
    assert resolved == ToolPolicy(ToolEffect.IDEMPOTENT_WRITE)
    assert options.resolve_tool_policy("other").effect is ToolEffect.NON_IDEMPOTENT_WRITE
    assert AgentSessionOptions().resolve_tool_policy("x").effect is ToolEffect.UNCLASSIFIED


def test_options_defaults_and_validation() -> None:
    options = AgentSessionOptions()
    assert options.tool_policies == {}
    assert options.agent_events_capacity_bytes == 10 * 1024 * 1024
    assert options.interrupt_deadline is None
    with pytest.raises(ValueError):
        AgentSessionOptions(agent_events_capacity_bytes=0)
    with pytest.raises(ValueError):
        AgentSessionOptions(interrupt_deadline=timedelta(0))


def test_status_enums_travel_as_plain_strings() -> None:
    state = AgentState(status=AgentStatus.RUNNING_TOOLS, turn_count=2, active_turn_id="turn-2")
    wire = msgspec.json.encode(state)
    assert b'"status":"running_tools"' in wire
    assert msgspec.json.decode(wire, type=AgentState) == state
    assert ToolCallStatus.OUTCOME_UNKNOWN.is_final and not ToolCallStatus.APPROVED.is_final
    assert ToolCallStatus.FAILED.ran and not ToolCallStatus.REJECTED.ran


def test_usage_adds_field_by_field() -> None:
    total = AgentUsage(requests=1, input_tokens=10, output_tokens=2, total_tokens=12).plus(
        AgentUsage(requests=1, input_tokens=5, output_tokens=1, total_tokens=6)
    )
    assert total == AgentUsage(requests=2, input_tokens=15, output_tokens=3, total_tokens=18)


async def test_turn_context_reads_records_and_policies() -> None:
    call = AgentToolCall(
        tool_call_id="a",
        turn_id="turn-1",
        tool_name="lookup",
        arguments="{}",
        effect=ToolEffect.READ,
        requires_approval=False,
        deferral_order=0,
        status=ToolCallStatus.SUCCEEDED,
        idempotency_key="s/turn-1/a",
        output="ok",
    )
    beats: list[int] = []

    async def beat() -> None:
        beats.append(1)

    writer = AgentEventWriter(
        lambda e: None, turn_id="turn-1", step_execution_id="RunModel-1", attempt=1
    )
    options = AgentSessionOptions(tool_policies={"lookup": ToolPolicy(ToolEffect.READ)})
    first = AgentTurnContext(
        flow_id="s",
        turn_id="turn-1",
        attempt=1,
        messages=[],
        framework_run_state=None,
        tool_calls={},
        events=writer,
        heartbeat=beat,
        options=options,
    )
    assert not first.is_resuming
    resumed = AgentTurnContext(
        flow_id="s",
        turn_id="turn-1",
        attempt=2,
        messages=[],
        framework_run_state="{}",
        tool_calls={"a": call},
        events=writer,
        heartbeat=beat,
        options=options,
    )
    assert resumed.is_resuming
    assert resumed.recorded_tool_call("a") is call
    with pytest.raises(KeyError):
        resumed.recorded_tool_call("b")
    assert resumed.resolve_tool_policy("lookup").effect is ToolEffect.READ
    assert resumed.resolve_tool_policy("x", ToolEffect.IDEMPOTENT_WRITE).effect is (
        ToolEffect.IDEMPOTENT_WRITE
    )
    assert is_approval_required(
        resumed.resolve_tool_policy("lookup", framework_requires_approval=True)
    )
    await resumed.heartbeat()
    assert beats == [1]
    await asyncio.sleep(0)


async def test_current_tool_execution_is_bound_only_inside_the_block() -> None:
    from dex_agents import DeferredToolExecution, current_tool_execution
    from dex_agents._runner import bind_tool_execution

    record = AgentToolCall(
        tool_call_id="c1",
        turn_id="turn-1",
        tool_name="refund",
        arguments="{}",
        effect=ToolEffect.IDEMPOTENT_WRITE,
        requires_approval=False,
        deferral_order=0,
        status=ToolCallStatus.APPROVED,
        idempotency_key="s-1/turn-1/c1",
    )

    async def no_heartbeat() -> None:
        return None

    call = DeferredToolExecution(
        flow_id="s-1",
        tool_call=record,
        idempotency_key=record.idempotency_key,
        attempt=1,
        events=AgentEventWriter(
            lambda event: None, turn_id="turn-1", step_execution_id="CallTool-1", attempt=1
        ),
        heartbeat=no_heartbeat,
    )
    seen: list[str | None] = []

    async def tool() -> None:
        here = current_tool_execution()
        seen.append(here.idempotency_key if here else None)
        in_thread = await asyncio.to_thread(current_tool_execution)
        seen.append(in_thread.idempotency_key if in_thread else None)

    assert current_tool_execution() is None
    with bind_tool_execution(call):
        await tool()
    assert current_tool_execution() is None
    assert seen == ["s-1/turn-1/c1", "s-1/turn-1/c1"]
