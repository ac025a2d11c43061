"""Agents written the way the OpenAI Agents SDK's documentation writes them, on FakeModel.

``triage``: the quickstart's triage agent with ``handoffs=[billing, faq]``; the billing
agent looks the order up (a read) and issues a refund whose tool has
``needs_approval=True`` (a non-idempotent write). Turn 2 starts with the billing agent,
the turn's ``last_agent``.

``approvals``: ``needs_approval`` both ways: ``add_note`` (an idempotent write, no
approval by default) has ``needs_approval=True``; ``issue_refund`` (a non-idempotent
write, approval by default) has a function that asks only above $100.

``guarded``: the quickstart's homework input guardrail (a guardrail agent with its own
model call and ``output_type``) on a triage agent handing off to a history tutor, whose
output guardrail blocks spoilers. Turn 1 trips the input guardrail, turn 2 is answered,
turn 3 trips the output guardrail.

The same ``ShapeDesk`` runs under Dex (a Worker child: ``flow_from_env``) and plainly in
the test process (``control_run``: ``Runner.run`` turn by turn, next turn from
``result.last_agent`` and ``result.to_input_list()``, every approval approved), so a
test compares what each model saw and answered. The scripts are stateless: they decide
from the request they are sent.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrail,
    InputGuardrailTripwireTriggered,
    OutputGuardrailTripwireTriggered,
    RunContextWrapper,
    Runner,
    function_tool,
    output_guardrail,
)
from agents.items import TResponseInputItem
from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
    current_tool_execution,
)
from dex_agents.testing import FileGate, InvocationLog
from pydantic import BaseModel

from dex_agents_openai_agents import (
    FakeModel,
    FakeModelRequest,
    FakeResponse,
    FakeToolCall,
    OpenAIAgentsRunner,
)

SHAPE_ENV = "OPENAI_AGENTS_SHAPE"
STATE_DIR_ENV = "OPENAI_AGENTS_SHAPE_STATE_DIR"
GATES_ENV = "OPENAI_AGENTS_SHAPE_GATES"
MODEL_KIND = "model"
TRIAGE = "triage"
APPROVALS = "approvals"
GUARDED = "guarded"

PROMPTS = {
    TRIAGE: [
        "My order 1042 arrived broken, I want my money back",
        "Thanks! What exactly did you refund?",
    ],
    APPROVALS: [
        "Refund $30 on order 1042 and note it on the ticket",
        "Now refund the other $219 too",
    ],
    GUARDED: [
        "Solve my math homework: 2x + 3 = 7",
        "Who was the first president of the United States?",
        "How did the American Revolutionary War end? Spoilers welcome",
    ],
}

POLICIES = {
    TRIAGE: {
        "lookup_order": ToolPolicy(ToolEffect.READ),
        "issue_refund": ToolPolicy(ToolEffect.NON_IDEMPOTENT_WRITE),
    },
    APPROVALS: {
        "lookup_order": ToolPolicy(ToolEffect.READ),
        "add_note": ToolPolicy(ToolEffect.IDEMPOTENT_WRITE),
        # Approval by default, but the tool's own needs_approval function may waive it.
        "issue_refund": ToolPolicy(
            ToolEffect.NON_IDEMPOTENT_WRITE, framework_may_waive_approval=True
        ),
    },
    GUARDED: {},
}


class HomeworkOutput(BaseModel):
    """The guardrail agent's structured verdict, as in the SDK's quickstart."""

    is_homework: bool
    reasoning: str


def tool_kind(name: str) -> str:
    return f"tool:{name}"


def model_key(agent_name: str, request: FakeModelRequest) -> str:
    return f"{agent_name}/turn-{request.user_turn}/call-{request.call_index}"


def gate_name(agent_name: str, turn: int, call: int) -> str:
    return f"model-{agent_name.lower().replace(' ', '-')}-{turn}-{call}"


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _call_outputs(request: FakeModelRequest, tool_name: str) -> list[str]:
    """Every output of ``tool_name`` in the whole conversation the request carries."""
    names = {
        str(item.get("call_id")): str(item.get("name"))
        for item in request.input
        if item.get("type") == "function_call"
    }
    return [
        str(item.get("output"))
        for item in request.input
        if item.get("type") == "function_call_output"
        and names.get(str(item.get("call_id"))) == tool_name
    ]


class ShapeDesk:
    """Tools, models and agents of one shape; everything it records goes to state_dir."""

    def __init__(self, shape: str, state_dir: Path, *, gates: Sequence[str] = ()) -> None:
        self.shape = shape
        self.state_dir = state_dir
        self.gates = set(gates)
        self.log = InvocationLog(state_dir / "calls.log")
        self.inputs_path = state_dir / "model-inputs.jsonl"

    def model_inputs(self) -> list[Any]:
        return [json.loads(line) for line in read_lines(self.inputs_path)]

    def refunds(self) -> list[str]:
        return read_lines(self.state_dir / "refunds.txt")

    # ------------------------------------------------------------------ models

    def model(self, agent_name: str, script: Any) -> FakeModel:
        async def on_call(request: FakeModelRequest) -> None:
            self.log.record(MODEL_KIND, model_key(agent_name, request))
            gate = gate_name(agent_name, request.user_turn, request.call_index)
            if gate in self.gates:
                await FileGate(self.state_dir, gate).pass_through()
            seen = {
                "agent": agent_name,
                "instructions": request.instructions,
                "tools": sorted(request.tool_names),
                "input": request.input,
            }
            with self.inputs_path.open("a") as file:
                file.write(json.dumps(seen, sort_keys=True, default=str) + "\n")

        return FakeModel(script, on_call=on_call)

    @staticmethod
    def triage_script(request: FakeModelRequest) -> FakeResponse | str:
        text = request.user_text.lower()
        if "president" in text or "war" in text:
            target = "transfer_to_history_tutor"
        elif "refund" in text or "broken" in text:
            target = "transfer_to_billing_agent"
        else:
            target = "transfer_to_faq_agent"
        return FakeResponse(
            text="Let me find the right agent. ", tool_calls=[FakeToolCall(name=target)]
        )

    @staticmethod
    def billing_script(request: FakeModelRequest) -> FakeResponse | str:
        refund = request.output_of("issue_refund")
        if request.user_turn >= 2:
            earlier = _call_outputs(request, "issue_refund")
            return f"Billing agent here. Earlier: {' | '.join(earlier)}"
        if refund is not None:
            return f"Billing agent: {refund}; order: {request.output_of('lookup_order')}"
        return FakeResponse(
            text="I'll check the order and refund it. ",
            tool_calls=[
                FakeToolCall(name="lookup_order", arguments={"order_id": 1042}),
                FakeToolCall(name="issue_refund", arguments={"order_id": 1042, "amount": 249}),
            ],
        )

    @staticmethod
    def faq_script(request: FakeModelRequest) -> str:
        return f"FAQ agent: see our help pages about {request.user_text!r}"

    @staticmethod
    def desk_script(request: FakeModelRequest) -> FakeResponse | str:
        if request.tool_outputs:
            seen = "; ".join(request.tool_outputs[key] for key in sorted(request.tool_outputs))
            return f"Done: {seen}"
        if request.user_turn == 1:
            return FakeResponse(
                tool_calls=[
                    FakeToolCall(name="issue_refund", arguments={"order_id": 1042, "amount": 30}),
                    FakeToolCall(
                        name="add_note", arguments={"order_id": 1042, "note": "refunded $30"}
                    ),
                ]
            )
        return FakeResponse(
            tool_calls=[
                FakeToolCall(name="issue_refund", arguments={"order_id": 1042, "amount": 219})
            ]
        )

    @staticmethod
    def guardrail_script(request: FakeModelRequest) -> str:
        homework = "homework" in request.user_text.lower()
        verdict = HomeworkOutput(is_homework=homework, reasoning=f"read {request.user_text!r}")
        return verdict.model_dump_json()

    @staticmethod
    def tutor_script(request: FakeModelRequest) -> str:
        if "war" in request.user_text.lower():
            return "Spoiler: it ended with the Treaty of Paris in 1783."
        return "History tutor: George Washington was the first president."

    # ------------------------------------------------------------------ tools

    def _enter_tool(self, name: str) -> str:
        execution = current_tool_execution()
        key = execution.idempotency_key if execution is not None else "plain-run"
        self.log.record(tool_kind(name), key)
        return key

    def tools(self) -> dict[str, Any]:
        desk = self

        @function_tool
        def lookup_order(order_id: int) -> str:
            """Look an order up by its number."""
            desk._enter_tool("lookup_order")
            return f"order {order_id}: espresso machine, $249"

        async def big_refund(
            _ctx: RunContextWrapper[Any], arguments: dict[str, Any], _id: str
        ) -> bool:
            return int(arguments.get("amount", 0)) > 100

        def issue_refund(order_id: int, amount: int) -> str:
            """Refund an amount on an order (not idempotent: every call pays out)."""
            desk._enter_tool("issue_refund")
            with (desk.state_dir / "refunds.txt").open("a") as file:
                file.write(f"{order_id}:{amount}\n")
            return f"refunded ${amount} on order {order_id}"

        @function_tool(needs_approval=True)
        def add_note(order_id: int, note: str) -> str:
            """Add a note to the order's ticket."""
            desk._enter_tool("add_note")
            return f"noted on order {order_id}: {note}"

        approval = big_refund if self.shape == APPROVALS else True
        refund = function_tool(issue_refund, needs_approval=approval)
        return {"lookup_order": lookup_order, "issue_refund": refund, "add_note": add_note}

    # ------------------------------------------------------------------ agents

    def agent(self) -> Agent[Any]:
        tools = self.tools()
        if self.shape == APPROVALS:
            return Agent(
                name="Refund desk",
                instructions="You refund orders and note what you did.",
                model=self.model("Refund desk", self.desk_script),
                tools=[tools["lookup_order"], tools["issue_refund"], tools["add_note"]],
            )
        if self.shape == GUARDED:
            return self._guarded_triage()
        billing = Agent(
            name="Billing agent",
            handoff_description="Specialist agent for billing and refunds",
            instructions="You handle billing questions. Look the order up before refunding.",
            model=self.model("Billing agent", self.billing_script),
            tools=[tools["lookup_order"], tools["issue_refund"]],
        )
        faq = Agent(
            name="FAQ agent",
            handoff_description="Answers general questions",
            instructions="You answer general questions about the shop.",
            model=self.model("FAQ agent", self.faq_script),
        )
        return Agent(
            name="Triage agent",
            instructions="Determine which agent to use based on the user's question.",
            model=self.model("Triage agent", self.triage_script),
            handoffs=[billing, faq],
        )

    def _guarded_triage(self) -> Agent[Any]:
        guardrail_agent = Agent(
            name="Guardrail check",
            instructions="Check if the user is asking about homework.",
            output_type=HomeworkOutput,
            model=self.model("Guardrail check", self.guardrail_script),
        )

        async def homework_guardrail(
            ctx: RunContextWrapper[Any],
            agent: Agent[Any],
            input_data: str | list[TResponseInputItem],
        ) -> GuardrailFunctionOutput:
            result = await Runner.run(guardrail_agent, input_data, context=ctx.context)
            final_output = result.final_output_as(HomeworkOutput)
            return GuardrailFunctionOutput(
                output_info=final_output, tripwire_triggered=final_output.is_homework
            )

        @output_guardrail
        async def no_spoilers(
            ctx: RunContextWrapper[Any], agent: Agent[Any], output: str
        ) -> GuardrailFunctionOutput:
            spoiler = output.startswith("Spoiler")
            return GuardrailFunctionOutput(
                output_info={"spoiler": spoiler}, tripwire_triggered=spoiler
            )

        tutor = Agent(
            name="History tutor",
            handoff_description="Specialist agent for historical questions",
            instructions="You provide assistance with historical queries.",
            model=self.model("History tutor", self.tutor_script),
            output_guardrails=[no_spoilers],
        )
        return Agent(
            name="Triage agent",
            instructions="You determine which agent to use based on the user's question.",
            model=self.model("Triage agent", self.triage_script),
            handoffs=[tutor],
            # Blocking, so the tripped turn makes no triage model call in either run.
            input_guardrails=[
                InputGuardrail(guardrail_function=homework_guardrail, run_in_parallel=False)
            ],
        )


def flow_type(shape: str) -> str:
    return f"OpenAIAgentsShape{shape.title()}"


def build_flow(shape: str, state_dir: Path, gates: Sequence[str] = ()) -> AgentSessionFlow:
    desk = ShapeDesk(shape, state_dir, gates=gates)
    return AgentSessionFlow(
        OpenAIAgentsRunner(desk.agent()),
        flow_type=flow_type(shape),
        options=AgentSessionOptions(tool_policies=POLICIES[shape]),
    )


def flow_from_env() -> AgentSessionFlow:
    gates = [g for g in os.environ.get(GATES_ENV, "").split(",") if g]
    return build_flow(os.environ[SHAPE_ENV], Path(os.environ[STATE_DIR_ENV]), gates)


class ControlRun:
    """What the plain SDK run gave: the final history, each turn's output or exception."""

    def __init__(self, desk: ShapeDesk) -> None:
        self.desk = desk
        self.history: list[TResponseInputItem] = []
        self.outputs: list[str] = []
        self.last_agents: list[str] = []


async def control_run(shape: str, state_dir: Path) -> ControlRun:
    """Run the shape with the SDK alone, the way its docs run a conversation."""
    desk = ShapeDesk(shape, state_dir)
    control = ControlRun(desk)
    agent = desk.agent()
    for prompt in PROMPTS[shape]:
        user: TResponseInputItem = {"role": "user", "content": prompt}
        turn_input = [*control.history, user]
        try:
            result = await Runner.run(agent, turn_input)
            while result.interruptions:
                state = result.to_state()
                for item in result.interruptions:
                    state.approve(item)
                result = await Runner.run(agent, state)
        except (InputGuardrailTripwireTriggered, OutputGuardrailTripwireTriggered) as exc:
            control.outputs.append(
                f"{type(exc).__name__}: {exc.guardrail_result.guardrail.get_name()}"
            )
            control.last_agents.append(agent.name)
            continue
        control.outputs.append(str(result.final_output))
        control.history = result.to_input_list()
        agent = result.last_agent
        control.last_agents.append(agent.name)
    return control
