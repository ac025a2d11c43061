"""Flows for lifecycle rules: ID reuse, stop types, start delay, recorded events, and
pending Channel messages that RPCs list and delete."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from dex import (
    Channel,
    ChannelMap,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepDecision,
    StepList,
    Wait,
    rpc,
)

MAILBOX = Channel("mailbox", str)
SHELVES = ChannelMap("shelves", int)


@dataclass(frozen=True, kw_only=True)
class Started:
    """What the start Step saw when it first ran."""

    run_id: str
    ran_at: float


class Hold(Step[str]):
    """Records an event, then waits for one ``mailbox`` message (``wait`` mode) or for
    two ``shelves/<input>`` messages (``shelf`` mode), or completes at once (``done``)."""

    def wait_for(self, context: Context, input: str) -> Wait:
        context.record_event("holding", {"mode": input, "ran_at": time.time()})
        if input == "done":
            return Wait.skip_immediately()
        if input.startswith("shelf"):
            return Wait.until(SHELVES.for_n(input, 2))
        return Wait.until(MAILBOX.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        if input.startswith("shelf"):
            return StepDecision.graceful_complete([str(v) for v in SHELVES.results(context, input)])
        if input == "done":
            return StepDecision.graceful_complete([context.run_id])
        return StepDecision.graceful_complete(MAILBOX.results(context))


@dataclass(frozen=True, kw_only=True)
class Pending:
    message_id: str
    value: str


class Lifecycle(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Hold())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(MAILBOX, SHELVES)

    @rpc
    def post(self, context: Context, input: str) -> None:
        MAILBOX.publish(context, input)

    @rpc
    def shelve(self, context: Context, input: list[int]) -> None:
        for value in input:
            SHELVES.publish(context, "shelf", value)

    @rpc(load_channels=(MAILBOX,))
    def pending(self, context: Context) -> list[Pending]:
        return [
            Pending(message_id=m.message_id, value=m.value)
            for m in MAILBOX.pending_messages(context)
        ]

    @rpc(is_transactional=True, load_channels=(MAILBOX,))
    def drop(self, context: Context, input: list[str]) -> int:
        for message_id in input:
            MAILBOX.delete(context, message_id)
        return MAILBOX.size(context)


LIFECYCLE = Lifecycle()
FLOWS: list[Flow[Any]] = [LIFECYCLE]
