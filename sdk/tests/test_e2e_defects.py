"""Engine defects seen through the SDK, with a real server and a Worker child."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dex import FlowErrorType, FlowStatus, StepDecision
from dex._decisions import DecisionKind
from dex._spec import decision_spec
from dex.errors import InvalidStepResultError

from tests.e2e_flows import defect_flows
from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import e2e_stack, history, payload, registry, unique_id
from tests.support import FileGate, async_wait_until

# how long a plain RPC's commit gets to land inside the transactional RPC's window
TOO_EARLY_S = 3.0


def test_go_to_many_without_a_movement_is_an_invalid_result() -> None:
    with pytest.raises(InvalidStepResultError, match="at least one StepMovement"):
        StepDecision.go_to_many()
    # a decision built without the factory is refused when the Worker encodes it
    entry = registry().flow_entry(defect_flows.EMPTY_FAN_OUT.get_flow_type())
    with pytest.raises(InvalidStepResultError, match="at least one StepMovement"):
        decision_spec(StepDecision(DecisionKind.NEXT), entry)


async def test_an_empty_fan_out_fails_the_flow_as_invalid_user_code(tmp_path: Path) -> None:
    async with e2e_stack(tmp_path) as stack:
        tag = unique_id("fan-out")
        await stack.client.start_flow(defect_flows.EMPTY_FAN_OUT, tag, tag)
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.status is FlowStatus.FAILED
        assert result.error_type is FlowErrorType.INVALID_USER_FLOW_CODE
        assert "at least one StepMovement" in (result.error_message or "")
        assert [line.split()[:2] for line in read_log(tmp_path, tag)] == [["fan-out", "1"]]
        types = [e.type for e in await history(stack.client, tag)]
        assert "StepExecuteCompleted" not in types and types[-1] == "FlowClosed"


async def test_a_plain_rpc_write_commits_after_a_transactional_rpc_holding_the_flow(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path) as stack:
        client = stack.client
        flow_id = unique_id("held")
        await client.start_flow(defect_flows.HELD_COUNTER, flow_id, "")
        gate = FileGate(tmp_path, f"{flow_id}-txn")
        txn = asyncio.create_task(client.invoke_rpc(defect_flows.HELD_COUNTER.add_one, flow_id))
        await gate.async_wait_until_reached(timeout=20)

        plain = asyncio.create_task(
            client.invoke_rpc(defect_flows.HELD_COUNTER.set_to, flow_id, 100)
        )

        async def ran_plain() -> bool:
            return bool(read_log(tmp_path, flow_id))

        await async_wait_until("the plain RPC ran", ran_plain, timeout=20)
        # the plain RPC ran on its snapshot; its write must wait for the transactional one
        finished, _ = await asyncio.wait({plain}, timeout=TOO_EARLY_S)
        assert not finished, "the plain RPC committed inside the transactional RPC's window"
        gate.release()
        assert await txn == 0
        await plain

        assert await client.invoke_rpc(defect_flows.HELD_COUNTER.read, flow_id) == 100
        events = await history(client, flow_id)
        rpcs = [payload(e)["rpcName"] for e in events if e.type == "RpcExecutionCompleted"]
        assert rpcs == ["add_one", "set_to"]
