"""The Flow of the Server-Sent Events tests, served by a Worker child.

``python -m tests._sse_flows ADDRESS TOKEN_FILE`` runs an ``AsyncWorker``. A ``Ticker``
Flow waits for a message on its ``cmd`` Channel (sent by the ``say`` RPC), writes each
word of it to its ``ticks`` Stream, and waits again; the message ``stop`` completes it.
"""

from __future__ import annotations

import asyncio
import sys

import dex
from dex import (
    Channel,
    Context,
    Flow,
    PersistenceSchema,
    Step,
    StepDecision,
    StepList,
    Stream,
    Wait,
    rpc,
)

CMD = Channel("cmd", str)
TICKS = Stream("ticks", str)


class Listen(Step[None]):
    def wait_for(self, context: Context, input: None) -> Wait:
        return Wait.until(CMD.for_one())

    def execute(self, context: Context, input: None) -> StepDecision:
        text = CMD.results(context)[0]
        for word in text.split():
            TICKS.write(context, word)
        if text == "stop":
            return StepDecision.graceful_complete("stopped")
        return StepDecision.go_to(Listen)


class Ticker(Flow[None]):
    def get_steps(self) -> StepList[None]:
        return StepList.start_step(Listen())

    def get_persistence_schema(self) -> PersistenceSchema:
        return PersistenceSchema.of(CMD, TICKS)

    @rpc(is_transactional=True)
    def say(self, context: Context, input: str) -> bool:
        CMD.publish(context, input)
        return True


async def _main(address: str, token_file: str) -> None:
    worker = dex.AsyncWorker(
        dex.Registry([Ticker()], allow_async_handlers=True),
        options=dex.WorkerOptions(
            server_address=address, credential=dex.FileCredential(token_file)
        ),
    )
    running = asyncio.create_task(worker.run())
    await worker.wait_pull_registered()
    print("ready", flush=True)
    await running


if __name__ == "__main__":
    asyncio.run(_main(sys.argv[1], sys.argv[2]))
