"""Retry arithmetic of Step methods."""

from __future__ import annotations

from dataclasses import dataclass

from dex._protocol import ErrorInfo, RetryPolicySpec


@dataclass(frozen=True, kw_only=True)
class RetryOutcome:
    """Whether a failed attempt is retried, and after how many seconds."""

    retry: bool
    delay_s: float = 0.0


def retry_delay(policy: RetryPolicySpec, attempt: int, error: ErrorInfo | None = None) -> float:
    """Delay before attempt ``attempt + 1``: the error's ``retry_after_s`` or the backoff.

    Backoff: ``min(initial * coefficient ** (attempt - 1), maximum_interval)``.
    """
    if error is not None and error.retry_after_s is not None:
        return max(0.0, error.retry_after_s)
    exponent = max(0, attempt - 1)
    try:
        raw = policy.initial_interval_s * policy.backoff_coefficient**exponent
    except OverflowError:
        raw = policy.maximum_interval_s
    return max(0.0, min(raw, policy.maximum_interval_s))


def decide_retry(
    policy: RetryPolicySpec,
    *,
    attempt: int,
    first_attempt_at: float,
    now: float,
    error: ErrorInfo,
) -> RetryOutcome:
    """Decide what follows failed attempt ``attempt`` (1-based).

    No retry when the error is non-retryable, when ``maximum_attempts`` is reached, or
    when the next attempt would start after ``first_attempt_at + total_duration_s``.
    ``first_attempt_at`` is when the phase's first attempt started (was dispatched), not
    when its execution was created.
    """
    if error.non_retryable:
        return RetryOutcome(retry=False)
    if policy.maximum_attempts is not None and attempt >= policy.maximum_attempts:
        return RetryOutcome(retry=False)
    delay = retry_delay(policy, attempt, error)
    if policy.total_duration_s is not None and now + delay > (
        first_attempt_at + policy.total_duration_s
    ):
        return RetryOutcome(retry=False)
    return RetryOutcome(retry=True, delay_s=delay)
