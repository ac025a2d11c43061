"""The agent session of the Dex Web live-update browser tests (also run in the Worker child).

Scripted model (no network): "live retry" answers on RunModel attempts 1 and 2 with half
of ``draft <attempt> ...`` and then fails, and on attempt 3 with the whole text; every
attempt first passes the ``FileGate`` ``live-<attempt>``, so a test can look at the page
(or SIGKILL the Worker) in the middle of the model call. "refund" asks for
``issue_refund``, a non-idempotent write that waits for approval. "live markup" streams
markup (attempt 1 half of it, then fails; gates ``markup-<attempt>``). Anything else is
echoed.
"""

from __future__ import annotations

import os
from pathlib import Path

from dex_agents import AgentSessionFlow, AgentSessionOptions, ToolEffect, ToolPolicy
from dex_agents.testing import (
    InvocationLog,
    ModelCall,
    ScriptedModel,
    ScriptedResponse,
    ScriptedRunner,
    ScriptedText,
    ScriptedToolCall,
    ScriptedToolCalls,
    run_agent_worker,
)

STATE_DIR_ENV = "DEX_WEB_LIVE_STATE_DIR"
FLOW_TYPE = "WebLive"
FAILING_ATTEMPTS = 2
# markup in live text; twice, so the half a failing attempt streams holds one whole copy
XSS = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


def draft(attempt: int) -> str:
    """The answer attempt ``attempt`` writes (its first half, when it fails)."""
    return f"draft {attempt} " * 8


def issue_refund(order_id: int, amount: int) -> str:
    return f"refunded {amount} on order {order_id}"


def _step(call: ModelCall) -> ScriptedResponse:
    if call.call_index > 0:
        lines = [f"{r.tool_name}: {r.status}: {r.content}" for r in call.tool_results]
        return ScriptedText(text="\n".join(lines) or "no tools ran")
    text = call.user_text.lower()
    if "live retry" in text:
        return ScriptedText(
            text=draft(call.attempt), fail_attempts=FAILING_ATTEMPTS, gate="live-{attempt}"
        )
    if "live markup" in text:
        return ScriptedText(text=XSS * 2, fail_attempts=1, gate="markup-{attempt}")
    if "refund" in text:
        refund = ScriptedToolCall(tool_name="issue_refund", arguments={"order_id": 7, "amount": 30})
        return ScriptedToolCalls(calls=[refund], text="I will refund it.")
    return ScriptedText(text=f"echo: {call.user_text}")


def build_flow(state_dir: Path) -> AgentSessionFlow:
    runner = ScriptedRunner(
        ScriptedModel(default=_step),
        {"issue_refund": issue_refund},
        log=InvocationLog(state_dir / "calls.log"),
        gate_dir=state_dir / "gates",
    )
    policies = {"issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE)}
    return AgentSessionFlow(
        runner, flow_type=FLOW_TYPE, options=AgentSessionOptions(tool_policies=policies)
    )


if __name__ == "__main__":
    run_agent_worker([build_flow(Path(os.environ[STATE_DIR_ENV]))])
