"""Agents written the way LangGraph's and LangChain's documentation writes them.

``tool_interrupt``: ``create_agent`` with a tool that calls ``interrupt()`` to ask the
customer (the human-in-the-loop tutorial), a read, and a refund.

``state_tools``: ``create_agent`` with a custom ``state_schema``, an ``InjectedState``
tool, a ``ToolRuntime`` tool returning ``Command(update=...)``, and a ``ToolRuntime`` tool
reading the updated state in the next turn.

``hitl``: ``create_agent`` with ``HumanInTheLoopMiddleware`` (approve / edit / reject).
``hitl_per_call``: the same with ``interrupt_mode="per_call"``.

``router``: a ``StateGraph`` with a triage model node routing to a billing model node
with a ``ToolNode`` (several model nodes in one turn).

``node_interrupt``: a ``StateGraph`` whose review node calls ``interrupt()`` after the
model drafted a reply.

``subgraph``: a ``StateGraph`` with a triage model node and a ``create_agent`` agent
added as a node (a subgraph).

The same ``ShapeDesk`` runs under Dex (a Worker child: ``flow_from_env``) and plainly with
LangGraph (``control_run``: an in-memory checkpointer and ``Command(resume=...)``), so a
test compares the conversations and states. The models are stateless scripts.
"""

from __future__ import annotations

import json
import operator
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from dex_agents import (
    AgentSessionFlow,
    AgentSessionOptions,
    ToolEffect,
    ToolPolicy,
    current_tool_execution,
)
from dex_agents.testing import FileGate, InvocationLog
from langchain.agents import AgentState, create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain.tools import ToolRuntime
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import InjectedState, ToolNode, tools_condition
from langgraph.types import Command, interrupt

from dex_agents_langgraph import (
    FakeModelCall,
    FakeReply,
    FakeToolCall,
    LangGraphRunner,
    ScriptedChatModel,
    with_effect,
)

SHAPE_ENV = "LG_SHAPE"
STATE_DIR_ENV = "LG_SHAPE_STATE_DIR"
GATES_ENV = "LG_SHAPE_GATES"
MODEL_KIND = "model"
TOOL_INTERRUPT = "tool_interrupt"
STATE_TOOLS = "state_tools"
HITL = "hitl"
ROUTER = "router"
NODE_INTERRUPT = "node_interrupt"
SUBGRAPH = "subgraph"
HITL_PER_CALL = "hitl_per_call"
SHAPES = (TOOL_INTERRUPT, STATE_TOOLS, HITL, HITL_PER_CALL, ROUTER, NODE_INTERRUPT, SUBGRAPH)

FIRST_PROMPT = "My order 1042 arrived broken, please refund it"
SECOND_PROMPT = "What did you do about my order?"

# What a person answers, in both runs: the durable run through Dex, the control through
# Command(resume=...).
CUSTOMER_ANSWER = {"method": "card"}
REVIEW_ANSWER = {"send": True}
EDITED_REFUND = {"order_id": 1042, "amount": 100}
NOTE_REJECTION = "not needed"
HITL_DECISIONS = {
    "decisions": [
        {"type": "edit", "edited_action": {"name": "issue_refund", "args": EDITED_REFUND}},
        {"type": "reject", "message": NOTE_REJECTION},
    ]
}


def tool_kind(name: str) -> str:
    return f"tool:{name}"


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def message_view(message: BaseMessage) -> tuple[Any, ...]:
    """What must be equal between the two runs (message IDs are random in each)."""
    calls = [(c["name"], c["args"], c.get("id")) for c in getattr(message, "tool_calls", [])]
    return (
        message.type,
        str(message.text),
        calls,
        getattr(message, "tool_call_id", None),
        getattr(message, "status", None),
    )


class DeskState(AgentState[Any]):
    """``create_agent``'s state plus the notes tools add."""

    notes: Annotated[list[str], operator.add]


class RouterState(MessagesState):
    """The router graph's state: the conversation and the triage decision."""

    route: str


class ShapeDesk:
    """One shape's graph, tools and models; writes land in ``state_dir``."""

    def __init__(self, shape: str, state_dir: Path, *, gates: Sequence[str] = ()) -> None:
        self.shape = shape
        self.state_dir = state_dir
        self.gates = set(gates)
        self.log = InvocationLog(state_dir / "calls.log")

    # ------------------------------------------------------------------ tools

    def _key(self) -> str:
        execution = current_tool_execution()
        return execution.idempotency_key if execution is not None else "plain"

    def _append(self, name: str, line: str) -> None:
        with (self.state_dir / name).open("a") as out:
            out.write(line + "\n")

    def tools(self) -> list[BaseTool]:
        desk = self

        @tool
        def lookup_order(order_id: int) -> str:
            """Look up an order by its number."""
            desk.log.record(tool_kind("lookup_order"), desk._key())
            return json.dumps({"order_id": order_id, "status": "broken", "total": 249})

        @tool
        def issue_refund(order_id: int, amount: int) -> str:
            """Refund an amount on an order (not idempotent)."""
            desk.log.record(tool_kind("issue_refund"), desk._key())
            desk._append("refunds.txt", f"{order_id}:{amount}")
            return f"refunded {amount} on order {order_id}"

        @tool
        def add_note(order_id: int, note: str) -> str:
            """Add a note to an order's ticket."""
            desk.log.record(tool_kind("add_note"), desk._key())
            desk._append("notes.txt", f"{order_id}:{note}")
            return f"noted on order {order_id}"

        @tool
        def ask_customer(question: str) -> str:
            """Ask the customer a question and wait for the answer."""
            desk.log.record(tool_kind("ask_customer"), desk._key())
            answer = interrupt({"question": question})
            return f"the customer chose {answer['method']}"

        @tool
        def count_messages(state: Annotated[dict[str, Any], InjectedState]) -> str:
            """Count the messages of the conversation so far."""
            desk.log.record(tool_kind("count_messages"), desk._key())
            return f"{len(state['messages'])} messages so far"

        @tool
        def save_note(note: str, runtime: ToolRuntime) -> Command[Any]:
            """Save a note about the customer in the agent's state (and the ticket)."""
            desk.log.record(tool_kind("save_note"), desk._key())
            desk._append("notes.txt", note)
            reply = ToolMessage(f"saved: {note}", tool_call_id=runtime.tool_call_id)
            return Command(update={"notes": [note], "messages": [reply]})

        @tool
        def list_notes(runtime: ToolRuntime) -> str:
            """List the notes saved about the customer."""
            desk.log.record(tool_kind("list_notes"), desk._key())
            return "notes: " + ", ".join(runtime.state.get("notes", []))

        with_effect(lookup_order, ToolEffect.READ)
        with_effect(issue_refund, ToolEffect.NON_IDEMPOTENT_WRITE)
        with_effect(add_note, ToolEffect.NON_IDEMPOTENT_WRITE)
        # It changes nothing before interrupt(): answering runs it again, as in LangGraph.
        with_effect(ask_customer, ToolEffect.READ)
        with_effect(count_messages, ToolEffect.READ)
        with_effect(save_note, ToolEffect.NON_IDEMPOTENT_WRITE)
        with_effect(list_notes, ToolEffect.READ)
        return [
            lookup_order,
            issue_refund,
            add_note,
            ask_customer,
            count_messages,
            save_note,
            list_notes,
        ]

    def pick(self, names: Sequence[str]) -> list[BaseTool]:
        by_name = {t.name: t for t in self.tools()}
        return [by_name[n] for n in names]

    # ------------------------------------------------------------------ models

    def model(self, node: str) -> ScriptedChatModel:
        desk = self

        def on_call(call: FakeModelCall) -> None:
            desk.log.record(MODEL_KIND, f"{node}/{call.turn_index}/{call.call_index}")

        async def script(call: FakeModelCall) -> FakeReply | str:
            gate = f"model-{node}-{call.turn_index}-{call.call_index}"
            if gate in desk.gates:
                await FileGate(desk.state_dir, gate).pass_through()
            return desk.reply(node, call)

        return ScriptedChatModel(script=script, on_call=on_call)

    def reply(self, node: str, call: FakeModelCall) -> FakeReply | str:
        results = "; ".join(f"{m.name}={m.status}:{m.text}" for m in call.tool_results)
        if node == "triage":
            return "billing"
        if call.turn_index == 1:
            if self.shape == STATE_TOOLS and call.call_index == 0:
                return FakeReply(
                    text="Checking notes.", tool_calls=[FakeToolCall(name="list_notes")]
                )
            seen = [m.type for m in call.messages]
            return f"turn 2 saw {seen}; {results}"
        if self.shape == TOOL_INTERRUPT:
            if call.call_index == 0:
                return FakeReply(
                    text="Let me check.",
                    tool_calls=[
                        FakeToolCall(name="lookup_order", args={"order_id": 1042}),
                        FakeToolCall(name="ask_customer", args={"question": "Card or credit?"}),
                    ],
                )
            if call.call_index == 1:
                refund = {"order_id": 1042, "amount": 249}
                return FakeReply(
                    text=f"Refunding ({results}).",
                    tool_calls=[FakeToolCall(name="issue_refund", args=refund)],
                )
            return f"done: {results}"
        if self.shape == STATE_TOOLS:
            if call.call_index == 0:
                return FakeReply(
                    text="Noting it.",
                    tool_calls=[
                        FakeToolCall(name="count_messages"),
                        FakeToolCall(name="save_note", args={"note": "prefers email"}),
                    ],
                )
            return f"done: {results}"
        if self.shape in (HITL, HITL_PER_CALL):
            if call.call_index == 0:
                return FakeReply(
                    text="On it.",
                    tool_calls=[
                        FakeToolCall(name="lookup_order", args={"order_id": 1042}),
                        FakeToolCall(name="issue_refund", args={"order_id": 1042, "amount": 249}),
                        FakeToolCall(name="add_note", args={"order_id": 1042, "note": "angry"}),
                    ],
                )
            return f"done: {results}"
        if self.shape in (ROUTER, SUBGRAPH):
            if call.call_index == 0:
                return FakeReply(
                    text="Billing here.",
                    tool_calls=[
                        FakeToolCall(name="lookup_order", args={"order_id": 1042}),
                        FakeToolCall(name="issue_refund", args={"order_id": 1042, "amount": 249}),
                    ],
                )
            return f"billing done: {results}"
        # NODE_INTERRUPT: the model drafts, the review node asks.
        return "Draft: we will refund order 1042."

    # ------------------------------------------------------------------ graphs

    def graph(self, checkpointer: Any = None) -> Any:
        if self.shape == TOOL_INTERRUPT:
            return create_agent(
                self.model("agent"),
                tools=self.pick(["lookup_order", "ask_customer", "issue_refund"]),
                system_prompt="You are a support agent.",
                checkpointer=checkpointer,
            )
        if self.shape == STATE_TOOLS:
            return create_agent(
                self.model("agent"),
                tools=self.pick(["count_messages", "save_note", "list_notes"]),
                state_schema=DeskState,
                checkpointer=checkpointer,
            )
        if self.shape in (HITL, HITL_PER_CALL):
            hitl = HumanInTheLoopMiddleware(
                interrupt_on={
                    "issue_refund": True,
                    "add_note": {"allowed_decisions": ["approve", "reject"]},
                },
                interrupt_mode="per_call" if self.shape == HITL_PER_CALL else "batched",
            )
            return create_agent(
                self.model("agent"),
                tools=self.pick(["lookup_order", "issue_refund", "add_note"]),
                middleware=[hitl],
                checkpointer=checkpointer,
            )
        if self.shape == ROUTER:
            return self._router(checkpointer)
        if self.shape == SUBGRAPH:
            return self._with_subgraph(checkpointer)
        return self._reviewed(checkpointer)

    def _router(self, checkpointer: Any) -> Any:
        triage_model = self.model("triage")
        billing_model = self.model("billing")
        tools = self.pick(["lookup_order", "issue_refund"])

        async def triage(state: RouterState) -> dict[str, Any]:
            decision = await triage_model.ainvoke(state["messages"])
            return {"route": str(decision.text)}

        async def billing(state: RouterState) -> dict[str, Any]:
            reply = await billing_model.bind_tools(tools).ainvoke(state["messages"])
            return {"messages": [reply]}

        builder = StateGraph(RouterState)
        builder.add_node("triage", triage)
        builder.add_node("billing", billing)
        builder.add_node("tools", ToolNode(tools))
        builder.add_edge(START, "triage")
        builder.add_conditional_edges("triage", lambda s: s["route"], {"billing": "billing"})
        builder.add_conditional_edges("billing", tools_condition, {"tools": "tools", END: END})
        builder.add_edge("tools", "billing")
        return builder.compile(checkpointer=checkpointer)

    def _with_subgraph(self, checkpointer: Any) -> Any:
        triage_model = self.model("triage")
        billing = create_agent(
            self.model("billing"), tools=self.pick(["lookup_order", "issue_refund"])
        )

        async def triage(state: RouterState) -> dict[str, Any]:
            decision = await triage_model.ainvoke(state["messages"])
            return {"route": str(decision.text)}

        builder = StateGraph(RouterState)
        builder.add_node("triage", triage)
        builder.add_node("billing", billing)
        builder.add_edge(START, "triage")
        builder.add_conditional_edges("triage", lambda s: s["route"], {"billing": "billing"})
        builder.add_edge("billing", END)
        return builder.compile(checkpointer=checkpointer)

    def _reviewed(self, checkpointer: Any) -> Any:
        model = self.model("draft")
        tools = self.pick(["lookup_order"])

        async def draft(state: MessagesState) -> dict[str, Any]:
            return {"messages": [await model.ainvoke(state["messages"])]}

        def review(state: MessagesState) -> dict[str, Any]:
            text = str(state["messages"][-1].text)
            answer = interrupt({"question": "Send this reply?", "draft": text})
            verdict = "sent" if answer.get("send") else "held"
            return {"messages": [AIMessage(f"{verdict}: {text}")]}

        builder = StateGraph(MessagesState)
        builder.add_node("draft", draft)
        builder.add_node("review", review)
        builder.add_node("tools", ToolNode(tools))
        builder.add_edge(START, "draft")
        builder.add_conditional_edges("draft", tools_condition, {"tools": "tools", END: "review"})
        builder.add_edge("tools", "draft")
        builder.add_edge("review", END)
        return builder.compile(checkpointer=checkpointer)


def flow_type(shape: str) -> str:
    return "LangGraphShape" + "".join(part.title() for part in shape.split("_"))


def build_flow(shape: str, state_dir: Path, gates: Sequence[str] = ()) -> AgentSessionFlow:
    desk = ShapeDesk(shape, state_dir, gates=gates)
    policies: dict[str, ToolPolicy] = {}
    if shape == TOOL_INTERRUPT:
        # The customer's answer is the go-ahead; Dex asks no separate approval.
        policies["issue_refund"] = ToolPolicy(
            ToolEffect.NON_IDEMPOTENT_WRITE, requires_approval=False
        )
    options = AgentSessionOptions(tool_policies=policies)
    return AgentSessionFlow(
        LangGraphRunner(desk.graph()), flow_type=flow_type(shape), options=options
    )


def flow_from_env() -> AgentSessionFlow:
    gates = [g for g in os.environ.get(GATES_ENV, "").split(",") if g]
    return build_flow(os.environ[SHAPE_ENV], Path(os.environ[STATE_DIR_ENV]), gates)


def _resume_for(value: Any) -> Any:
    if isinstance(value, dict) and "action_requests" in value:
        return HITL_DECISIONS
    if isinstance(value, dict) and value.get("type") == "tool_approval":
        by_name = {
            "issue_refund": HITL_DECISIONS["decisions"][0],
            "add_note": HITL_DECISIONS["decisions"][1],
        }
        return by_name[value["name"]]
    if isinstance(value, dict) and value.get("question") == "Send this reply?":
        return REVIEW_ANSWER
    return CUSTOMER_ANSWER


async def control_run(
    shape: str, state_dir: Path, prompts: Sequence[str]
) -> tuple[ShapeDesk, dict[str, Any]]:
    """The shape run plainly with LangGraph: a checkpointer and ``Command(resume=...)``."""
    desk = ShapeDesk(shape, state_dir)
    graph = desk.graph(InMemorySaver())
    config: Any = {"configurable": {"thread_id": "control"}}
    for prompt in prompts:
        result = await graph.ainvoke({"messages": [HumanMessage(prompt)]}, config)
        while result.get("__interrupt__"):
            pending = result["__interrupt__"]
            answers = {i.id: _resume_for(i.value) for i in pending}
            result = await graph.ainvoke(Command(resume=answers), config)
    state = await graph.aget_state(config)
    return desk, dict(state.values)
