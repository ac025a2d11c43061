"""Stream writes held for the commit (``Stream.write(..., after_commit=True)``).

``Announce`` writes one live and one held value per attempt and records the attempt in
``seen``; attempt 1 fails (its held value must never appear), attempt 2 parks at the gate
``"<input>-hold"`` before it returns. ``AnnounceSync`` (a plain sync handler, so its
writes come from a worker thread) writes a held value before a live one. ``Park`` waits
for a message that never comes, so the ``seen`` RPC can read the committed state.
"""

from __future__ import annotations

from datetime import timedelta

from dex import (
    Attribute,
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    RetryPolicy,
    Step,
    StepDecision,
    StepList,
    StepOptions,
    Stream,
    Wait,
    rpc,
)

from tests.e2e_flows.common import async_context
from tests.support import FileGate

NEWS = Stream("news", str)
SEEN = Attribute("seen", int)
NEVER = Channel("never", int)


class Announce(Step[str]):
    async def execute(self, ctx: Context, input: str) -> StepDecision:
        context = async_context(ctx)
        NEWS.write(context, f"live {context.attempt}")
        NEWS.write(context, f"committed {context.attempt}", after_commit=True)
        SEEN.set(context, context.attempt)
        if context.attempt == 1:
            raise RuntimeError("the first attempt fails after its writes")
        await FileGate.from_env(f"{input}-hold").async_pass_through()
        return StepDecision.go_to(AnnounceSync, input)

    def get_step_options(self) -> StepOptions:
        return StepOptions(
            execute_retry=RetryPolicy(initial_interval=timedelta(seconds=0.1), maximum_attempts=3)
        )


class AnnounceSync(Step[str]):
    def execute(self, context: Context, input: str) -> StepDecision:
        NEWS.write(context, "sync committed", after_commit=True)
        NEWS.write(context, "sync live")
        SEEN.set(context, 10)
        return StepDecision.go_to(Park, input)


class Park(Step[str]):
    def wait_for(self, context: Context, input: str) -> Wait:
        return Wait.until(NEVER.for_one())

    def execute(self, context: Context, input: str) -> StepDecision:
        return StepDecision.graceful_complete()


class AnnounceFlow(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Announce()).other_steps(AnnounceSync(), Park())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(NEWS, SEEN, NEVER)

    @rpc
    def seen(self, context: Context) -> int:
        return SEEN.get(context) or 0


ANNOUNCE = AnnounceFlow()
FLOWS = [ANNOUNCE]
