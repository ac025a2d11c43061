"""The log line of a failed attempt: what failed, where, and whether it is retried."""

from __future__ import annotations

import logging
import time

from dex._protocol import ErrorInfo, RetryPolicySpec, Task
from dex._worker._logs import attempt_failure_line

ERROR = ErrorInfo(error_type="TypeError", message="bad operand", stack="Traceback ...\nTypeError")


def _task(**kw: object) -> Task:
    fields: dict[str, object] = {
        "task_id": "t1",
        "kind": "execute",
        "flow_type": "Orders",
        "flow_id": "order-7",
        "run_id": "r1",
        "step_type": "Charge",
        "attempt": 1,
    }
    fields.update(kw)
    return Task(**fields)  # type: ignore[arg-type]


def test_a_retried_attempt_is_a_warning_with_the_traceback() -> None:
    level, text = attempt_failure_line(_task(), ERROR, RetryPolicySpec(maximum_attempts=3))
    assert level == logging.WARNING
    assert text.startswith(
        "Step Charge.execute of Flow Orders order-7 (attempt 1 of 3) failed: "
        "TypeError: bad operand; will retry\nTraceback ..."
    )


def test_the_last_attempt_is_an_error_naming_the_limit() -> None:
    level, text = attempt_failure_line(_task(attempt=3), ERROR, RetryPolicySpec(maximum_attempts=3))
    assert level == logging.ERROR
    assert "will not retry: attempt 3 was the last of maximum_attempts=3" in text


def test_a_spent_time_budget_and_a_non_retryable_error_are_not_retried() -> None:
    old = _task(attempt=9, first_attempt_at=time.time() - 100)
    _, text = attempt_failure_line(old, ERROR, RetryPolicySpec(total_duration_s=50))
    assert "the retry budget total_duration=50s is spent" in text
    final = ErrorInfo(error_type="InvalidStepResultError", message="no", non_retryable=True)
    _, text = attempt_failure_line(_task(), final, RetryPolicySpec())
    assert "will not retry: InvalidStepResultError is not retryable" in text


def test_an_unlimited_policy_retries_and_an_rpc_error_goes_to_its_caller() -> None:
    _, text = attempt_failure_line(_task(attempt=40), ERROR, RetryPolicySpec())
    assert "(attempt 40) failed" in text and text.splitlines()[0].endswith("will retry")
    rpc = _task(kind="rpc", step_type=None, rpc_name="cancel")
    level, text = attempt_failure_line(rpc, ERROR, None)
    assert level == logging.WARNING
    assert text.startswith("RPC cancel of Flow Orders order-7 failed: TypeError: bad operand;")
    assert "the caller receives the error" in text
