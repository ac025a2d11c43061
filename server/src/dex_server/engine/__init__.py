"""Pure engine decisions: no I/O, no clock reads, no store access.

Every function here takes records and the current time and returns what to do; the
service layer performs the I/O around them. That keeps the rules testable exhaustively.
"""

from __future__ import annotations

from dex_server.engine.decisions import (
    CloseRequest,
    DecisionPlan,
    InvalidDecisionError,
    LiveExecution,
    NewExecution,
    plan_decision,
    plan_movements,
    plan_step_cancellation,
)
from dex_server.engine.ids import format_execution_id, new_uuid7
from dex_server.engine.retry import RetryOutcome, decide_retry, retry_delay
from dex_server.engine.schema import (
    InvalidSpecError,
    StateNames,
    UndeclaredStateError,
    check_attribute_names,
    check_channel_names,
    check_spec,
)
from dex_server.engine.timeouts import TimeoutKind, expired
from dex_server.engine.waits import (
    WaitingExecution,
    WaitMatch,
    channel_demand,
    inline_wait_usable,
    match_waits,
    next_fire_at,
    resolve_timers,
)

__all__ = [
    "CloseRequest",
    "DecisionPlan",
    "InvalidDecisionError",
    "InvalidSpecError",
    "LiveExecution",
    "NewExecution",
    "RetryOutcome",
    "StateNames",
    "TimeoutKind",
    "UndeclaredStateError",
    "WaitMatch",
    "WaitingExecution",
    "channel_demand",
    "check_attribute_names",
    "check_channel_names",
    "check_spec",
    "decide_retry",
    "expired",
    "format_execution_id",
    "inline_wait_usable",
    "match_waits",
    "new_uuid7",
    "next_fire_at",
    "plan_decision",
    "plan_movements",
    "plan_step_cancellation",
    "resolve_timers",
    "retry_delay",
]
