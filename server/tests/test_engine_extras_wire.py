"""Wire-level refusals of condition combinations and conditional completion (raw Worker).

A Worker that is not the SDK may send any Wait or decision: the server refuses the ones
no Flow can run, failing the attempt as invalid Flow code (not retried), and commits
nothing of them.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from dex._protocol import (
    ConditionSpec,
    DecisionSpec,
    FlowSpec,
    Movement,
    StartFlowRequest,
    StateDecl,
    StepSpec,
    Task,
    TaskResult,
    WaitSpec,
    encoder,
)
from dex_server.testing import running_server

from tests._rawworker import RawWorker

SPEC = FlowSpec(
    flow_type="Extras",
    start_step="W",
    steps=[StepSpec(step_type="W", has_wait_for=True)],
    state=[StateDecl(name="inbox", kind="channel"), StateDecl(name="boxes", kind="channel_map")],
)
_CHAN = ConditionSpec(kind="channel", channel="inbox")

BAD_WAITS = {
    "no-id": WaitSpec(mode="any_combination", conditions=[_CHAN], groups=[[0]]),
    "no-groups": WaitSpec(
        mode="any_combination",
        conditions=[ConditionSpec(kind="channel", channel="inbox", condition_id="a")],
    ),
    "out-of-range": WaitSpec(
        mode="any_combination",
        conditions=[ConditionSpec(kind="channel", channel="inbox", condition_id="a")],
        groups=[[0, 4]],
    ),
    "groups-on-all": WaitSpec(mode="all", conditions=[_CHAN], groups=[[0]]),
}
BAD_DECISIONS = {
    "undeclared": DecisionSpec(
        kind="force_complete_if_channels_empty",
        movements=[Movement(step_type="W")],
        empty_channels=["nowhere"],
    ),
    "undeclared-map": DecisionSpec(
        kind="force_complete_if_channels_empty",
        movements=[Movement(step_type="W")],
        empty_channel_maps=["inbox"],  # a Channel, not a ChannelMap
    ),
    "no-fallback": DecisionSpec(kind="force_complete_if_channels_empty", empty_channels=["inbox"]),
}


async def handler(w: RawWorker, t: Task) -> TaskResult:
    if t.kind == "wait_for":
        wait = BAD_WAITS.get(t.flow_id, WaitSpec(mode="skip"))
        return TaskResult(task_id=t.task_id, wait=wait)
    return TaskResult(task_id=t.task_id, decision=BAD_DECISIONS[t.flow_id])


async def test_unrunnable_waits_and_conditional_completions_fail_the_attempt(
    tmp_path: Path,
) -> None:
    flows = [*BAD_WAITS, *BAD_DECISIONS]
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], handler) as w,
        httpx.AsyncClient(base_url=srv.url, timeout=30) as http,
    ):
        for flow_id in flows:
            req = StartFlowRequest(flow_type="Extras", flow_id=flow_id, spec=SPEC)
            assert (await http.post("/v1/flows", content=encoder.encode(req))).status_code == 200
        for flow_id in flows:
            res = (await http.get(f"/v1/flows/{flow_id}/result?timeout_s=20")).json()
            assert res["status"] == "failed", (flow_id, res)
            assert res["error_type"] == "INVALID_USER_FLOW_CODE", (flow_id, res)
        # each failed at once (no retry): one wait_for per Flow, one execute per decision
        assert len(w.tasks) == len(BAD_WAITS) + 2 * len(BAD_DECISIONS)
