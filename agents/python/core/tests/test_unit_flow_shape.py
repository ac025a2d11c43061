from __future__ import annotations

from dex import Registry
from dex._protocol import FlowSpec, StepSpec
from dex_agents import (
    AgentFrameworkRunner,
    AgentSessionFlow,
    AgentSessionOptions,
    AgentTurnContext,
    AgentTurnOutcome,
    DeferredToolExecution,
    FrameworkMessage,
    MessageRole,
    ToolExecutionResult,
    TurnCompleted,
)


class EchoRunner:
    def build_user_message(self, text: str) -> FrameworkMessage:
        return FrameworkMessage(role=MessageRole.USER, framework_item=text, text=text)

    async def run_model_step(self, turn: AgentTurnContext) -> AgentTurnOutcome:
        return TurnCompleted(new_messages=[])

    async def execute_deferred_tool_call(self, call: DeferredToolExecution) -> ToolExecutionResult:
        return ToolExecutionResult(output="")


def spec() -> FlowSpec:
    flow = AgentSessionFlow(
        EchoRunner(),
        flow_type="Triage",
        options=AgentSessionOptions(agent_events_capacity_bytes=4096),
    )
    (only,) = Registry([flow], allow_async_handlers=True).flow_specs()
    return only


def steps() -> dict[str, StepSpec]:
    return {s.step_type: s for s in spec().steps}


def test_runner_satisfies_the_protocol() -> None:
    assert isinstance(EchoRunner(), AgentFrameworkRunner)


def test_flow_shape_matches_the_seeds() -> None:
    flow_spec = spec()
    assert flow_spec.flow_type == "Triage"
    assert flow_spec.start_step == "StartAgentSession"
    assert set(steps()) == {
        "StartAgentSession",
        "AwaitUserMessage",
        "RunModel",
        "AwaitToolApproval",
        "CallTool",
        "CallSingleAttemptTool",
        "RecordToolFailure",
        "RecordToolOutcomeUnknown",
        "ReconcileToolCall",
        "RecordReconcileFailure",
        "ResumeTurn",
        "RecordTurnFailure",
        "StopTurn",
        "RaiseToolQuestion",
    }
    rpcs = {r.name: r for r in flow_spec.rpcs}
    assert set(rpcs) == {
        "send_user_message",
        "resolve_interrupt",
        "get_agent_snapshot",
        "list_agent_messages",
        "steer_user_message",
        "cancel_turn",
        "reconcile_tool_call",
    }
    assert rpcs["send_user_message"].is_transactional
    assert rpcs["resolve_interrupt"].locks == ["PendingInterrupts"]
    assert not rpcs["get_agent_snapshot"].is_transactional
    # messages are read on demand (only the last 200 keys), never loaded whole
    assert set(rpcs["get_agent_snapshot"].loads.attribute_maps) == {"AgentToolCalls"}
    assert not rpcs["list_agent_messages"].loads.attribute_maps
    streams = [d for d in flow_spec.state if d.kind == "stream"]
    assert [(d.name, d.stream_capacity_bytes) for d in streams] == [("AgentEvents", 4096)]


def test_every_step_is_sync_on_both_methods() -> None:
    for step in steps().values():
        assert step.options.wait_for_durability == "sync", step.step_type
        assert step.options.execute_durability == "sync", step.step_type


def test_run_model_timeouts_retries_and_failure_route() -> None:
    options = steps()["RunModel"].options
    assert options.execute_timeout_s == 15 * 60
    assert options.heartbeat_timeout_s == 2 * 60
    assert options.execute_retry.maximum_attempts == 3
    assert options.execute_retry.total_duration_s == 30 * 60
    assert options.execute_failure_step == "RecordTurnFailure"
    # the history is read incrementally on demand (AttributeMap.load_range), not loaded whole
    assert set(options.execute_loads.attribute_maps) == {"AgentToolCalls"}


def test_tool_steps_retry_policies_and_routes() -> None:
    call = steps()["CallTool"].options
    assert call.execute_retry.maximum_attempts == 3
    assert call.execute_failure_step == "RecordToolFailure"
    single = steps()["CallSingleAttemptTool"].options
    assert single.execute_retry.maximum_attempts == 1
    assert single.execute_failure_step == "RecordToolOutcomeUnknown"
    assert steps()["AwaitToolApproval"].has_wait_for
    assert steps()["ResumeTurn"].has_wait_for


def test_a_tool_calls_movement_loads_only_its_record_and_keeps_every_other_option() -> None:
    import dataclasses

    from dex_agents._persistence import persistence
    from dex_agents._tool_steps import _RunToolStep

    flow = AgentSessionFlow(EchoRunner(), flow_type="Triage")
    for definition in flow.get_steps():
        step = definition.step
        if not isinstance(step, _RunToolStep):
            continue
        base = step.cached_base_options()
        options = step.options_for("call/1")
        load = (persistence.AgentToolCalls.load("call/1"),)
        failure = base.execute_failure_options
        assert failure is not None
        expected = dataclasses.replace(
            base,
            wait_for_load_attribute_map_instances=load,
            execute_load_attribute_map_instances=load,
            execute_failure_options=dataclasses.replace(
                failure,
                wait_for_load_attribute_map_instances=load,
                execute_load_attribute_map_instances=load,
            ),
        )
        assert options == expected
        # the Step's own options, shared by every call, are left as they were
        assert base.execute_load_attribute_map_instances == ()
        assert failure.execute_load_attribute_map_instances == ()
        assert step.cached_base_options() is base
