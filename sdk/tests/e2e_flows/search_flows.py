"""A Flow whose Attributes carry every index type, for search and Attribute matches."""

from __future__ import annotations

from typing import Any

from dex import (
    Attribute,
    AttributeIndex,
    AttributeMap,
    Channel,
    Context,
    Flow,
    IndexType,
    PersistenceSchema,
    RPCResult,
    Step,
    StepDecision,
    StepList,
    Wait,
    rpc,
)

BATCH = Attribute("batch", str, AttributeIndex(IndexType.KEYWORD, "Batch"))
STATUS = Attribute("order_status", str, AttributeIndex(IndexType.KEYWORD, "OrderStatus"))
NOTE = Attribute("note", str, AttributeIndex(IndexType.FULL_TEXT, "Note"))
TAGS = Attribute("tags", list[str], AttributeIndex(IndexType.KEYWORD_ARRAY, "Tags"))
AMOUNT = Attribute("Amount", int, AttributeIndex(IndexType.INT))
PRICE = Attribute("price", float, AttributeIndex(IndexType.DOUBLE, "Price"))
VIP = Attribute("vip", bool, AttributeIndex(IndexType.BOOL, "Vip"))
DUE = Attribute("due", str, AttributeIndex(IndexType.DATETIME, "Due"))
LABELS = AttributeMap("labels", str, AttributeIndex(IndexType.KEYWORD, "Label"))
STAGE = Attribute("stage", str)
GO = Channel("search_go", str)

_BY_NAME: dict[str, Attribute[Any]] = {
    a.name: a for a in (BATCH, STATUS, NOTE, TAGS, AMOUNT, PRICE, VIP, DUE, STAGE)
}


def _apply(context: Context, values: dict[str, Any]) -> None:
    for name, value in values.items():
        if name.startswith("labels/"):
            LABELS.set(context, name.partition("/")[2], value)
        else:
            _BY_NAME[name].set(context, value)


class Place(Step[dict[str, Any]]):
    """Writes the input's Attributes in its commit, then waits in Hold."""

    def execute(self, context: Context, input: dict[str, Any]) -> StepDecision:
        _apply(context, input)
        STAGE.set(context, "placed")
        return StepDecision.go_to(Hold, None)


class Hold(Step[None]):
    """Waits for a message on ``search_go``, then completes."""

    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(GO.for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        STAGE.set(context, "done")
        return StepDecision.graceful_complete("done")


class SearchOrder(Flow[dict[str, Any]]):
    """Indexed Attributes of every type; ``update`` writes some, ``finish`` completes it."""

    def get_steps(self) -> StepList[dict[str, Any]]:
        return StepList.start_step(Place()).other_steps(Hold())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(*_BY_NAME.values(), LABELS, GO)

    @rpc(is_transactional=True)
    def update(self, context: Context, input: dict[str, Any]) -> RPCResult[str]:
        _apply(context, input)
        return RPCResult(output="updated")

    @rpc(is_transactional=True)
    def finish(self, context: Context) -> RPCResult[str]:
        GO.publish(context, "go")
        return RPCResult(output="finishing")


SEARCH_ORDER = SearchOrder()
FLOWS = [SEARCH_ORDER]
