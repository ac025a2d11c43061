"""Engine defects seen through the SDK, with a real server and a Worker child."""

from __future__ import annotations

from pathlib import Path

import pytest
from dex import FlowStatus, StepDecision
from dex._spec import decision_spec
from dex.errors import InvalidStepResultError

from tests.e2e_flows import defect_flows
from tests.e2e_flows.common import read_log
from tests.e2e_flows.harness import e2e_stack, history, registry, unique_id


def test_go_to_many_without_a_movement_is_an_invalid_result() -> None:
    with pytest.raises(InvalidStepResultError, match="at least one StepMovement"):
        StepDecision.go_to_many()
    # a decision built without the factory is refused when the Worker encodes it
    entry = registry().flow_entry(defect_flows.EMPTY_FAN_OUT.get_flow_type())
    with pytest.raises(InvalidStepResultError, match="at least one StepMovement"):
        decision_spec(StepDecision("go_to"), entry)


async def test_an_empty_fan_out_fails_the_flow_as_invalid_user_code(tmp_path: Path) -> None:
    async with e2e_stack(tmp_path) as stack:
        tag = unique_id("fan-out")
        await stack.client.start_flow(defect_flows.EMPTY_FAN_OUT, tag, tag)
        result = await stack.client.wait_for_flow(tag, timeout=30)

        assert result.status is FlowStatus.FAILED
        assert result.error_type == "INVALID_USER_FLOW_CODE"
        assert "at least one StepMovement" in (result.error_message or "")
        assert [line.split()[:2] for line in read_log(tmp_path, tag)] == [["fan-out", "1"]]
        types = [e.type for e in await history(stack.client, tag)]
        assert "StepExecuteCompleted" not in types and types[-1] == "FlowClosed"
