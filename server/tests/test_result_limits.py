"""``check_result_limits``: what a Step result may write, and the sizes it reports."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
from dex._protocol import DecisionSpec, Movement, Publish, TaskResult
from dex_server.service._common import LimitError, Limits
from dex_server.service._steps import check_result_limits
from dex_server.store import Tx
from dex_server.store._records import FlowRecord
from msgspec import Raw

LIMITS = Limits(
    blob_threshold_bytes=1 << 20,
    max_value_bytes=10,
    max_flow_state_bytes=40,
    max_request_bytes=1 << 20,
    retention_s=60,
)


class _Sizes:
    """The store's size read, over a fixed table of stored sizes."""

    def __init__(self, stored: dict[str, int]) -> None:
        self.stored = stored
        self.asked: list[list[str]] = []

    def sizes_of(self, run_id: str, names: Sequence[str]) -> dict[str, int]:
        self.asked.append(list(names))
        return {n: self.stored[n] for n in names if n in self.stored}


class _Tx:
    def __init__(self, stored: dict[str, int]) -> None:
        self.state = _Sizes(stored)


def check(result: TaskResult, *, used: int = 0, stored: dict[str, int] | None = None) -> Any:
    tx = _Tx(stored or {})
    flow = FlowRecord(run_id="r", flow_id="f", flow_type="T", started_at=0, state_bytes=used)
    return check_result_limits(cast(Tx, tx), LIMITS, flow, result), tx.state.asked


def test_sizes_replaced_are_returned_and_a_delete_or_null_adds_nothing() -> None:
    result = TaskResult(
        task_id="t",
        attribute_writes={"a": Raw(b'"12345678"'), "b": None, "c": Raw(b"null")},
        publishes=[Publish(channel="in", value=Raw(b"1234"))],
    )
    # 10 + 0 + 0 written, 4 published, 8 replaced: 26 + 6 = 32, within 40
    old, asked = check(result, used=26, stored={"a": 8})
    assert old == {"a": 8}
    assert asked == [["a", "b", "c"]]
    with pytest.raises(LimitError, match="max_flow_state_bytes"):
        check(result, used=35, stored={"a": 8})


def test_a_result_without_attribute_writes_reads_no_sizes() -> None:
    old, asked = check(TaskResult(task_id="t", publishes=[Publish(channel="in", value=Raw(b"1"))]))
    assert old == {} and asked == []


@pytest.mark.parametrize(
    ("result", "named"),
    [
        (TaskResult(task_id="t", attribute_writes={"big": Raw(b'"123456789"')}), "Attribute 'big'"),
        (
            TaskResult(
                task_id="t", publishes=[Publish(channel="inbox", value=Raw(b"[1,2,3,4,5]"))]
            ),
            "message to Channel 'inbox'",
        ),
        (
            TaskResult(
                task_id="t",
                decision=DecisionSpec(
                    kind="go_to",
                    movements=[Movement(step_type="Next", input=Raw(b'"123456789"'))],
                ),
            ),
            "input of Step 'Next'",
        ),
        (TaskResult(task_id="t", rpc_output=Raw(b'"123456789"')), "RPC output"),
    ],
)
def test_a_value_over_max_value_bytes_is_refused_naming_the_limit_and_the_value(
    result: TaskResult, named: str
) -> None:
    with pytest.raises(LimitError, match="max_value_bytes") as caught:
        check(result)
    assert named in str(caught.value)
    assert "11 bytes" in str(caught.value)
