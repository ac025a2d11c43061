"""History event payloads (camelCase JSON, like dexcli prints them).

Values inside payloads are the stored JSON values, or ``{"__dexBlobReference": {"id":
hash, "kind": "object"}}`` for values kept as blobs.
"""

from __future__ import annotations

from typing import Any

import msgspec

FLOW_STARTED = "FlowStarted"
STEP_WAIT_FOR_COMPLETED = "StepWaitForCompleted"
STEP_WAIT_FOR_FAILED = "StepWaitForFailed"
STEP_EXECUTE_COMPLETED = "StepExecuteCompleted"
STEP_EXECUTE_FAILED = "StepExecuteFailed"
RPC_EXECUTION_COMPLETED = "RpcExecutionCompleted"
FLOW_CLOSED = "FlowClosed"
FLOW_CONFIG_UPDATED = "FlowConfigUpdated"
FLOW_TIMEOUT_FIRED = "FlowTimeoutFired"

_encoder = msgspec.json.Encoder()


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None and v != [] and v != {}}


def blob_reference(hash_: str) -> msgspec.Raw:
    """Return the JSON stand-in for a value stored as a blob."""
    return msgspec.Raw(_encoder.encode({"__dexBlobReference": {"id": hash_, "kind": "object"}}))


def step_event(
    *,
    step_type: str,
    execution_id: str,
    from_execution_id: str,
    final_attempt: int,
    started_time: float,
    duration: float,
    input: dict[str, Any],
    output: dict[str, Any],
    durability: str | None = None,
) -> bytes:
    """Payload of ``StepWaitFor*`` / ``StepExecute*`` events.

    ``durability`` is the one the method ran with (its option, else SYNC for a method with
    a recovery route, else the Flow's ``step_durability``, else SYNC).
    """
    context = {
        "stepType": step_type,
        "stepExecutionId": execution_id,
        "fromStepExecutionId": from_execution_id,
        "finalAttempt": final_attempt,
        "startedTime": started_time,
        "duration": duration,
    }
    if durability is not None:
        context["durability"] = durability
    return _encoder.encode({"context": context, "input": _clean(input), "output": _clean(output)})


def flow_started(
    *,
    flow_type: str,
    start_step_type: str | None,
    input: msgspec.Raw | None,
    initial_attributes: dict[str, msgspec.Raw],
    request_id: str,
) -> bytes:
    """Payload of ``FlowStarted``."""
    return _encoder.encode(
        _clean(
            {
                "flowType": flow_type,
                "startStepType": start_step_type,
                "input": input,
                "initialAttributes": initial_attributes,
                "requestId": request_id or None,
            }
        )
    )


def flow_closed(
    *,
    status: str,
    error_type: str | None,
    error_message: str | None,
    completions: list[dict[str, Any]],
    error_detail: str | None = None,
) -> bytes:
    """Payload of ``FlowClosed``; ``errorDetail`` says which execution failed, and how."""
    return _encoder.encode(
        _clean(
            {
                "status": status,
                "errorType": error_type,
                "errorMessage": error_message,
                "errorDetail": error_detail,
                "completions": completions,
            }
        )
    )


def rpc_completed(*, rpc_name: str, input: msgspec.Raw | None, output: dict[str, Any]) -> bytes:
    """Payload of ``RpcExecutionCompleted``."""
    return _encoder.encode(_clean({"rpcName": rpc_name, "input": input, "output": _clean(output)}))


def flow_config_updated(*, update: Any, config: Any) -> bytes:
    """Payload of ``FlowConfigUpdated``: the fields given, and the merged config."""
    return _encoder.encode({"update": update, "config": config})


def flow_timeout_fired(*, policy: str, deadline: float | None, fired_at: float) -> bytes:
    """Payload of ``FlowTimeoutFired``: the resolved policy, the deadline, when it fired.

    ``firedAt`` before ``deadline`` means the timer was skipped (``skip_timer``).
    """
    return _encoder.encode({"policy": policy, "deadline": deadline, "firedAt": fired_at})
