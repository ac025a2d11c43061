"""Flows for durable state: Attributes, AttributeMaps, Channels and ChannelMaps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dex import (
    Attribute,
    AttributeMap,
    Channel,
    ChannelMap,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepDecision,
    StepList,
    StepMovement,
    StepOptions,
    Timer,
    Wait,
    rpc,
)
from dex.errors import AttributeMapNotLoadedError

# --------------------------------------------------------------------------- attributes

OWNER = Attribute("owner", str)
COUNTER = Attribute("counter", int)
ITEMS = AttributeMap("items", str)
REPORT = AttributeMap("report", str)  # observations of each Step, read back by an RPC


def _observe(context: Context, key: str, value: object) -> None:
    REPORT.set(context, key, repr(value))


class WriteState(Step[int]):
    """Reads the initial Attribute and unset defaults, writes, reads its own writes."""

    def execute(self, context: Context, input: int) -> StepDecision:
        _observe(context, "owner_initial", OWNER.get(context))
        _observe(context, "counter_unset", COUNTER.get(context))
        COUNTER.set(context, input)
        _observe(context, "counter_read_own_write", COUNTER.get(context))
        for key, value in (("b", "bee"), ("a", "ay"), ("k 1?x", "slash"), ("c", "sea")):
            ITEMS.set(context, key, value)
        _observe(context, "items_a_own_write", ITEMS.get(context, "a"))
        return StepDecision.go_to(ListWholeMap, input)


class ListWholeMap(Step[int]):
    """Loads every instance of ``items``, lists sorted keys, deletes one, counts."""

    def execute(self, context: Context, input: int) -> StepDecision:
        _observe(context, "keys", ITEMS.get_all_instance_keys(context))
        _observe(context, "size", ITEMS.get_map_size(context))
        _observe(context, "slash_value", ITEMS.get(context, "k 1?x"))
        ITEMS.delete(context, "b")
        _observe(context, "keys_after_delete", ITEMS.get_all_instance_keys(context))
        COUNTER.set(context, (COUNTER.get(context) or 0) + 1)
        only_c = StepOptions(execute_load_attribute_map_instances=(ITEMS.load("c"),))
        return StepDecision.go_to_many(StepMovement.of(ReadSelected, input, options=only_c))

    def get_step_options(self) -> StepOptions:
        return StepOptions(execute_load_attribute_maps=(ITEMS, REPORT))


class ReadSelected(Step[int]):
    """Runs with a per-movement load of ``items/c`` only."""

    def execute(self, context: Context, input: int) -> StepDecision:
        _observe(context, "selected_c", ITEMS.get(context, "c"))
        try:
            ITEMS.get(context, "a")
        except AttributeMapNotLoadedError:
            _observe(context, "selected_a", "not-loaded")
        return StepDecision.go_to(ReadNothing, input)


class ReadNothing(Step[int]):
    """Loads no map instance: reading one raises AttributeMapNotLoadedError."""

    def execute(self, context: Context, input: int) -> StepDecision:
        try:
            ITEMS.get(context, "c")
        except AttributeMapNotLoadedError:
            _observe(context, "unloaded_c", "not-loaded")
        _observe(context, "counter_final", COUNTER.get(context))
        return StepDecision.graceful_complete(COUNTER.get(context) or 0)


@dataclass(frozen=True, kw_only=True)
class StateView:
    """Everything ``AttributeFlow.view`` reads."""

    owner: str | None
    counter: int
    items: dict[str, str]
    report: dict[str, str]


class AttributeFlow(Flow[int]):
    """Attribute and AttributeMap reads, writes, deletes and load selections."""

    def get_steps(self) -> StepList[int]:
        return StepList.start_step(WriteState()).other_steps(
            ListWholeMap(), ReadSelected(), ReadNothing()
        )

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(OWNER, COUNTER, ITEMS, REPORT)

    @rpc(load_attribute_maps=(ITEMS, REPORT))
    def view(self, context: Context) -> StateView:
        items = {k: v for k in ITEMS.get_all_instance_keys(context) if (v := ITEMS.get(context, k))}
        report = {
            k: v for k in REPORT.get_all_instance_keys(context) if (v := REPORT.get(context, k))
        }
        return StateView(
            owner=OWNER.get(context), counter=COUNTER.get(context) or 0, items=items, report=report
        )

    @rpc
    def read_unloaded(self, context: Context) -> str:
        try:
            ITEMS.get(context, "a")
        except AttributeMapNotLoadedError as exc:
            return f"AttributeMapNotLoadedError: {exc}"
        return "loaded?"


# --------------------------------------------------------------------------- channels

INBOX = Channel("inbox", int)
BOXES = ChannelMap("boxes", str)


@dataclass(frozen=True, kw_only=True)
class WaitPlan:
    """Which Wait ``Collect`` returns; ``prepublish`` is published before it waits."""

    kind: str
    n: int = 0
    hi: int = 0
    key: str = "k1"
    timer_s: float = 0.0
    prepublish: list[int] = field(default_factory=list)
    prepublish_boxes: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Collected:
    """What ``Collect.execute`` saw."""

    inbox: list[int]
    boxes: list[str]
    timer_fired: bool


class Prepare(Step[WaitPlan]):
    """Publishes the plan's messages (committed with this decision), then goes to Collect."""

    def execute(self, context: Context, input: WaitPlan) -> StepDecision:
        for value in input.prepublish:
            INBOX.publish(context, value)
        for key, values in input.prepublish_boxes.items():
            for text in values:
                BOXES.publish(context, key, text)
        return StepDecision.go_to(Collect, input)


def _wait_for_plan(plan: WaitPlan) -> Wait:
    kind = plan.kind
    if kind == "for_one":
        return Wait.until(INBOX.for_one())
    if kind == "for_n":
        return Wait.until(INBOX.for_n(plan.n))
    if kind == "at_least":
        return Wait.until(INBOX.at_least(plan.n))
    if kind == "at_most":
        return Wait.until(INBOX.at_most(plan.n))
    if kind == "for_range":
        return Wait.until(INBOX.for_range(plan.n, plan.hi))
    if kind == "map_for_one":
        return Wait.until(BOXES.for_one(plan.key))
    if kind == "any_timer_vs_channel":
        return Wait.any_of(INBOX.for_one(), Timer.by_duration(plan.timer_s))
    if kind == "any_map_first":
        return Wait.any_of(BOXES.for_one(plan.key), INBOX.for_one())
    if kind == "all_of":
        return Wait.all_of(
            INBOX.for_n(plan.n), BOXES.for_one(plan.key), Timer.by_duration(plan.timer_s)
        )
    raise ValueError(f"unknown wait kind {kind!r}")


class Collect(Step[WaitPlan]):
    def wait_for(self, context: Context, input: WaitPlan) -> Wait:
        return _wait_for_plan(input)

    def execute(self, context: Context, input: WaitPlan) -> StepDecision:
        return StepDecision.graceful_complete(
            Collected(
                inbox=list(INBOX.results(context)),
                boxes=list(BOXES.results(context, input.key)),
                timer_fired=context.has_timer_fired(),
            )
        )


@dataclass(frozen=True, kw_only=True)
class BoxMessage:
    key: str
    value: str


class ChannelFlow(Flow[WaitPlan]):
    """Prepare(plan) -> Collect(plan): one Wait over ``inbox`` / ``boxes`` / a Timer."""

    def get_steps(self) -> StepList[WaitPlan]:
        return StepList.start_step(Prepare()).other_steps(Collect())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(INBOX, BOXES)

    @rpc
    def push(self, context: Context, input: list[int]) -> None:
        for value in input:
            INBOX.publish(context, value)

    @rpc(is_transactional=True)
    def push_box(self, context: Context, input: BoxMessage) -> None:
        BOXES.publish(context, input.key, input.value)

    @rpc
    def inbox_size(self, context: Context) -> int:
        return INBOX.size(context)

    @rpc
    def box_size(self, context: Context, input: str) -> int:
        return BOXES.size(context, input)


ATTRIBUTE_FLOW = AttributeFlow()
CHANNEL_FLOW = ChannelFlow()
FLOWS: list[Flow[Any]] = [ATTRIBUTE_FLOW, CHANNEL_FLOW]
