"""A task's deadline on the Worker: one session timer cancels the handler after the grace."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from dex import AsyncWorker, Context, Flow, Registry, Step, StepDecision, StepList
from dex._worker._deadlines import Deadlines

from .unit_support import task

RUNNING: dict[str, asyncio.Event] = {}
RELEASE: dict[str, asyncio.Event] = {}


class Hang(Step[str]):
    """Waits until the test releases its input; a cancel it gets is swallowed when asked."""

    async def execute(self, context: Context, input: str) -> StepDecision:
        RUNNING[input].set()
        try:
            await RELEASE[input].wait()
        except asyncio.CancelledError:
            if input.startswith("stubborn"):
                return StepDecision.graceful_complete(f"{input} kept going")
            raise
        return StepDecision.graceful_complete(f"{input} done")


class Hanging(Flow[str]):
    def get_steps(self) -> StepList[str]:
        return StepList.start_step(Hang())


def _start(worker: AsyncWorker, name: str, deadline: float) -> None:
    RUNNING[name] = asyncio.Event()
    RELEASE[name] = asyncio.Event()
    worker._session._on_task(
        msgspec.structs.replace(
            task("execute", "Hang", flow_type="Hanging", input=name, deadline=deadline),
            task_id=name,
        )
    )


async def _results(worker: AsyncWorker, count: int) -> dict[str, Any]:
    session = worker._session
    async with asyncio.timeout(10):
        while len(session._out) < count:
            await asyncio.sleep(0.01)
    results = [msgspec.json.decode(data)["result"] for _, data, _ in session._out]
    return {result["task_id"]: result for result in results}


async def test_a_handler_past_its_deadline_and_grace_fails_with_task_deadline_exceeded() -> None:
    worker = AsyncWorker(Registry([Hanging()], allow_async_handlers=True))
    # long past: the grace is over at once; far ahead: never due in this test
    _start(worker, "late", time.time() - 5)
    _start(worker, "early", time.time() + 3600)
    await RUNNING["early"].wait()
    results = await _results(worker, 1)
    assert results["late"]["error"]["error_type"] == "TaskDeadlineExceeded"
    assert "early" in worker._session._tasks  # still running, its deadline far off
    RELEASE["early"].set()
    results = await _results(worker, 2)
    assert results["early"].get("error") is None
    assert worker._session._deadlines._due == {}


async def test_an_earlier_deadline_rearms_the_timer_and_a_handler_may_keep_its_result() -> None:
    worker = AsyncWorker(Registry([Hanging()], allow_async_handlers=True))
    _start(worker, "far", time.time() + 3600)
    await RUNNING["far"].wait()
    # due 0.2 s from now (deadline + the 1 s grace): earlier than the armed timer
    _start(worker, "stubborn", time.time() - 0.8)
    results = await _results(worker, 1)
    # a handler that takes the cancel and returns keeps its result, like asyncio.timeout
    assert results["stubborn"].get("error") is None
    assert "far" in worker._session._tasks
    RELEASE["far"].set()
    await _results(worker, 2)


async def test_deadlines_call_back_in_order_and_not_after_forget() -> None:
    fired: list[tuple[str, float]] = []
    loop = asyncio.get_running_loop()
    deadlines = Deadlines(lambda key: fired.append((key, loop.time())))
    now = loop.time()
    deadlines.watch("c", now + 0.15)
    deadlines.watch("a", now + 0.05)
    deadlines.watch("b", now + 0.1)
    deadlines.watch("gone", now + 0.07)
    deadlines.forget("gone")
    async with asyncio.timeout(5):
        while len(fired) < 3:
            await asyncio.sleep(0.01)
    assert [key for key, _ in fired] == ["a", "b", "c"]
    offsets = [at - now for _, at in fired]
    assert all(at >= due - 0.01 for at, due in zip(offsets, (0.05, 0.1, 0.15), strict=True))
    deadlines.watch("closed", loop.time())
    deadlines.close()
    await asyncio.sleep(0.05)
    assert [key for key, _ in fired] == ["a", "b", "c"]
