from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest
from dex_agents import AgentEvent, AgentEventType, AgentEventWriter, ToolCallStatus, _session
from dex_agents._events import TEXT_FLUSH_BYTES, run_heartbeats, start_heartbeats


def make_writer(sink: list[AgentEvent]) -> AgentEventWriter:
    return AgentEventWriter(
        sink.append, turn_id="turn-3", step_execution_id="RunModel-4", attempt=2
    )


async def poll(predicate: object, timeout: float = 2.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def test_events_carry_turn_step_execution_and_attempt() -> None:
    sink: list[AgentEvent] = []
    writer = make_writer(sink)
    writer.write_tool_call_started("a", "lookup")
    writer.write_tool_call_finished("a", "lookup", ToolCallStatus.SUCCEEDED)
    writer.close()
    assert [e.type for e in sink] == [
        AgentEventType.TOOL_CALL_STARTED,
        AgentEventType.TOOL_CALL_FINISHED,
    ]
    assert all(
        (e.turn_id, e.step_execution_id, e.attempt) == ("turn-3", "RunModel-4", 2) for e in sink
    )
    assert sink[1].data == {"tool_call_id": "a", "tool_name": "lookup", "status": "succeeded"}


async def test_text_deltas_are_batched_until_another_event_or_close() -> None:
    sink: list[AgentEvent] = []
    writer = make_writer(sink)
    for chunk in ("Hel", "lo", ", ", "world"):
        writer.write_text_delta(chunk)
    assert sink == []
    writer.write_reasoning_delta("hmm")
    assert [(e.type, e.data["text"]) for e in sink] == [(AgentEventType.TEXT_DELTA, "Hello, world")]
    writer.write_event(AgentEventType.USAGE_RECORDED, {"recorded": {}, "session": {}})
    assert [e.type for e in sink][1:] == [
        AgentEventType.REASONING_DELTA,
        AgentEventType.USAGE_RECORDED,
    ]
    writer.write_text_delta("tail")
    writer.close()
    assert sink[-1].data == {"text": "tail"}


async def test_batched_text_flushes_after_a_short_interval() -> None:
    sink: list[AgentEvent] = []
    writer = make_writer(sink)
    writer.write_text_delta("a")
    writer.write_text_delta("b")
    await poll(lambda: len(sink) == 1)
    assert sink[0].data == {"text": "ab"}
    writer.close()
    assert len(sink) == 1


async def test_large_batches_flush_at_the_size_limit() -> None:
    sink: list[AgentEvent] = []
    writer = make_writer(sink)
    writer.write_text_delta("x" * TEXT_FLUSH_BYTES)
    assert len(sink) == 1 and len(sink[0].data["text"]) == TEXT_FLUSH_BYTES
    writer.close()


async def test_writes_after_close_are_dropped() -> None:
    sink: list[AgentEvent] = []
    writer = make_writer(sink)
    writer.close()
    writer.write_text_delta("late")
    writer.write_event("my_event", {"x": 1})
    writer.close()
    await asyncio.sleep(0.1)
    assert sink == []
    assert writer.closed


async def test_unknown_event_types_become_custom_events() -> None:
    sink: list[AgentEvent] = []
    writer = make_writer(sink)
    writer.write_event("plan_updated", {"steps": 3})
    writer.write_event("text_delta", {"text": "via write_event"})
    writer.close()
    assert sink[0].type is AgentEventType.CUSTOM
    assert sink[0].data == {"name": "plan_updated", "steps": 3}
    assert sink[1].type is AgentEventType.TEXT_DELTA


async def test_writes_from_other_threads_reach_the_loop_in_order() -> None:
    sink: list[AgentEvent] = []
    loop_thread = threading.get_ident()
    seen_threads: set[int] = set()

    def record(event: AgentEvent) -> None:
        seen_threads.add(threading.get_ident())
        sink.append(event)

    writer = AgentEventWriter(record, turn_id="t", step_execution_id="CallTool-1", attempt=1)

    def work() -> None:
        for i in range(20):
            writer.write_event(AgentEventType.CUSTOM, {"i": i})

    await asyncio.to_thread(work)
    await poll(lambda: len(sink) == 20)
    writer.close()
    assert [e.data["i"] for e in sink] == list(range(20))
    assert seen_threads == {loop_thread}


async def test_a_failing_sink_never_raises_into_the_runner() -> None:
    def broken(event: AgentEvent) -> None:
        raise RuntimeError("stream down")

    writer = AgentEventWriter(broken, turn_id="t", step_execution_id="S-1", attempt=1)
    writer.write_event(AgentEventType.CUSTOM, {})
    writer.write_text_delta("x")
    writer.close()


async def test_background_heartbeats_tick_until_cancelled() -> None:
    beats: list[float] = []

    async def beat() -> None:
        beats.append(time.monotonic())
        if len(beats) == 2:
            raise RuntimeError("one missed heartbeat is ignored")

    task = asyncio.create_task(run_heartbeats(beat, interval_s=0.01))
    await poll(lambda: len(beats) >= 4)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert task.cancelled()


async def test_started_heartbeats_begin_one_interval_later_and_stop() -> None:
    beats: list[float] = []

    async def beat() -> None:
        beats.append(time.monotonic())
        if len(beats) == 2:
            raise RuntimeError("one missed heartbeat is ignored")

    # stopped before the first beat is due: nothing ever runs (no task was started)
    stop = start_heartbeats(beat, interval_s=0.05)
    stop()
    started = time.monotonic()
    stop = start_heartbeats(beat, interval_s=0.05)
    await poll(lambda: len(beats) >= 3)
    stop()
    count = len(beats)
    assert beats[0] - started >= 0.04  # the first one waits a whole interval
    await asyncio.sleep(0.15)
    assert len(beats) == count  # none after stop


async def test_a_runner_call_closes_its_writer_and_stops_its_heartbeats_when_it_raises(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    beats: list[float] = []

    async def heartbeat() -> None:
        beats.append(time.monotonic())

    written: list[AgentEvent] = []
    parts = SimpleNamespace(events=SimpleNamespace(write=lambda ctx, event: written.append(event)))
    ctx = SimpleNamespace(heartbeat=heartbeat, attempt=3, step_execution_id="RunModel-7")
    monkeypatch.setattr(_session, "start_heartbeats", lambda beat: start_heartbeats(beat, 0.01))
    with pytest.raises(RuntimeError, match="model failed"):
        async with _session.runner_call(parts, ctx, "turn-2") as writer:  # type: ignore[arg-type]
            await poll(lambda: len(beats) >= 2)
            writer.write_text_delta("partial answer")
            assert not writer.closed and written == []  # the delta waits in its batch
            raise RuntimeError("model failed")
    assert writer.closed
    assert [(e.type, e.data, e.turn_id, e.attempt) for e in written] == [
        (AgentEventType.TEXT_DELTA, {"text": "partial answer"}, "turn-2", 3)
    ]
    stopped_at = len(beats)
    await asyncio.sleep(0.05)  # five intervals: a running beat would have ticked
    assert len(beats) == stopped_at
