"""The agent session of the Dex Web browser tests, built the same way in the Worker child.

Scripted model (no network): a message with "refund" asks for ``issue_refund`` (a
non-idempotent write, so it waits for approval, for at most an hour; "two refunds" asks
for two at once); one with "html" runs ``render_html``; one with "visit" runs
``book_visit`` (a read), which asks a person for the visit's date (a ``question``
interrupt) and books the answered date, or reports the decline,
whose output is markup that must show as text; anything else is echoed. After tool
results the model answers with one line per result, quoting what the tool (or a
rejection) said.
"""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolInputRequired,
    ToolPolicy,
    ToolQuestion,
    current_tool_execution,
)
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

STATE_DIR_ENV = "DEX_WEB_TEST_STATE_DIR"
FLOW_TYPE = "WebDesk"
APPROVAL_DEADLINE_H = 1
XSS = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'


def issue_refund(order_id: int, amount: int) -> str:
    return f"refunded {amount} on order {order_id}"


def render_html() -> str:
    return XSS


VISIT_QUESTION = ToolQuestion(
    key="visit-date",
    message="Which day suits the visit?",
    requested_schema={
        "type": "object",
        "properties": {"day": {"type": "string", "description": "the visit's date"}},
        "required": ["day"],
    },
)


def book_visit(site: str) -> str:
    call = current_tool_execution()
    answers = list(call.answers) if call is not None else []
    if not answers:
        raise ToolInputRequired(VISIT_QUESTION)
    answer = answers[-1]
    if answer.action != "accept" or answer.content is None:
        return f"no visit booked at {site}: the person declined"
    return f"visit booked at {site} on {answer.content.get('day')}"


def _step(call: ModelCall) -> ScriptedResponse:
    if call.call_index > 0:
        lines = [f"{r.tool_name}: {r.status}: {r.content}" for r in call.tool_results]
        return ScriptedText(text="\n".join(lines) or "no tools ran")
    text = call.user_text.lower()
    if "two refunds" in text:
        calls = [
            ScriptedToolCall(tool_name="issue_refund", arguments={"order_id": n, "amount": 5})
            for n in (1, 2)
        ]
        return ScriptedToolCalls(calls=calls, text="I will refund both.")
    if "refund" in text:
        refund = ScriptedToolCall(tool_name="issue_refund", arguments={"order_id": 7, "amount": 30})
        return ScriptedToolCalls(calls=[refund], text="I will refund it.")
    if "visit" in text:
        visit = ScriptedToolCall(tool_name="book_visit", arguments={"site": "depot"})
        return ScriptedToolCalls(calls=[visit], text="I will ask when.")
    if "html" in text:
        return ScriptedToolCalls(calls=[ScriptedToolCall(tool_name="render_html")])
    return ScriptedText(text=f"echo: {call.user_text}")


def build_flow(state_dir: Path) -> AgentSessionFlow:
    runner = ScriptedRunner(
        ScriptedModel(default=_step),
        {"issue_refund": issue_refund, "render_html": render_html, "book_visit": book_visit},
        log=InvocationLog(state_dir / "calls.log"),
    )
    policies = {
        "issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
        "render_html": ToolPolicy(ToolEffect.READ),
        "book_visit": ToolPolicy(ToolEffect.READ),
    }
    # approvals expire after an hour: a Timer the state panel and the inbox show
    options = AgentSessionOptions(
        tool_policies=policies, interrupt_deadline=timedelta(hours=APPROVAL_DEADLINE_H)
    )
    return AgentSessionFlow(runner, flow_type=FLOW_TYPE, options=options)


if __name__ == "__main__":
    run_agent_worker([build_flow(Path(os.environ[STATE_DIR_ENV]))])
