"""Engine defects under real processes: a server subprocess and a wire-level Worker.

Each test drives one decision the engine must get right when the timing is unkind: an empty
fan-out, a retry window behind a long start delay, a durable start carried across phases
over a server kill, and writes that land while a transactional RPC holds its run.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import msgspec
from dex._protocol import (
    AttributeRangeSpec,
    AttributeValuesWire,
    ConditionSpec,
    DecisionSpec,
    ErrorInfo,
    FlowSpec,
    Heartbeat,
    HeartbeatAck,
    InvokeRpcRequest,
    Movement,
    Publish,
    ReadAttributesRequest,
    RetryPolicySpec,
    RpcSpec,
    StartFlowRequest,
    StateDecl,
    StepOptionsSpec,
    StepSpec,
    Task,
    TaskResult,
    WaitSpec,
    encoder,
)
from dex_server.testing import running_server

from tests._rawworker import RawWorker, raw

DEADLINE_S = 20.0


async def until(what: str, probe: Callable[[], Awaitable[Any]], timeout: float = DEADLINE_S) -> Any:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        got = await probe()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def start(http: httpx.AsyncClient, spec: FlowSpec, flow_id: str, **extra: Any) -> None:
    body = StartFlowRequest(
        flow_type=spec.flow_type, flow_id=flow_id, spec=spec, input=raw(flow_id), **extra
    )
    r = await http.post("/v1/flows", content=encoder.encode(body))
    assert r.status_code == 200, r.text


async def result(http: httpx.AsyncClient, flow_id: str) -> dict[str, Any]:
    r = await http.get(
        f"/v1/flows/{flow_id}/result", params={"timeout_s": DEADLINE_S}, timeout=DEADLINE_S + 10
    )
    assert r.status_code == 200, f"Flow {flow_id} did not close: {r.text}"
    out: dict[str, Any] = r.json()
    return out


async def history_types(http: httpx.AsyncClient, flow_id: str) -> list[tuple[str, str]]:
    """``(event type, step execution ID or RPC name)`` of the Flow's history."""
    events = (await http.get(f"/v1/flows/{flow_id}/history")).json()["events"]
    out = []
    for e in events:
        p = e["payload"]
        ctx = p.get("context", {}) if isinstance(p, dict) else {}
        out.append((e["type"], ctx.get("stepExecutionId") or p.get("rpcName", "")))
    return out


def done(tid: str) -> TaskResult:
    return TaskResult(task_id=tid, decision=DecisionSpec(kind="graceful_complete"))


def failed(tid: str, message: str) -> TaskResult:
    return TaskResult(task_id=tid, error=ErrorInfo(error_type="RuntimeError", message=message))


# --------------------------------------------------------------------------- empty fan-out

FAN = FlowSpec(flow_type="Fan", start_step="A", steps=[StepSpec(step_type="A")])


async def test_a_go_to_with_no_movement_fails_the_flow_as_invalid_user_code(
    tmp_path: Path,
) -> None:
    async def empty_fan_out(w: RawWorker, t: Task) -> TaskResult | None:
        return TaskResult(task_id=t.task_id, decision=DecisionSpec(kind="go_to", movements=[]))

    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [FAN], empty_fan_out) as w,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await start(http, FAN, "fan")
        res = await result(http, "fan")
        assert res["status"] == "failed", res
        assert res["error_type"] == "INVALID_USER_FLOW_CODE"
        assert "no Step to go to" in res["error_message"]
        assert [t.attempt for t in w.tasks] == [1]  # invalid code is not retried
        assert ("StepExecuteCompleted", "A-1") not in await history_types(http, "fan")


# --------------------------------------------------------------------------- retry window

WINDOW = FlowSpec(
    flow_type="Window",
    start_step="A",
    steps=[
        StepSpec(
            step_type="A",
            options=StepOptionsSpec(
                execute_retry=RetryPolicySpec(initial_interval_s=0.1, total_duration_s=2.0)
            ),
        )
    ],
)


async def test_the_retry_window_opens_at_the_first_attempt_not_at_a_delayed_start(
    tmp_path: Path,
) -> None:
    async def third_time_lucky(w: RawWorker, t: Task) -> TaskResult | None:
        if t.attempt < 3:
            return failed(t.task_id, f"attempt {t.attempt} fails")
        return done(t.task_id)

    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [WINDOW], third_time_lucky) as w,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        # the start delay alone is longer than the 2 s retry window
        await start(http, WINDOW, "late", start_delay_s=3.0)
        res = await result(http, "late")
        assert res["status"] == "completed", res
        assert [t.attempt for t in w.tasks] == [1, 2, 3]
        # what the handler sees as the first attempt's start is when it was dispatched
        assert w.tasks[1].first_attempt_at == w.tasks[2].first_attempt_at
        assert w.tasks[0].first_attempt_at == w.tasks[1].first_attempt_at


# --------------------------------------------------------------------------- durable start

PROCEED = FlowSpec(
    flow_type="Proceed",
    start_step="S",
    steps=[
        StepSpec(
            step_type="S",
            has_wait_for=True,
            options=StepOptionsSpec(
                wait_for_retry=RetryPolicySpec(maximum_attempts=1),
                wait_for_failure_proceed=True,
                execute_retry=RetryPolicySpec(maximum_attempts=1),
            ),
        )
    ],
)


async def test_a_durable_wait_for_start_does_not_fail_execute_after_a_server_kill(
    tmp_path: Path,
) -> None:
    async def durable_then_fail(w: RawWorker, t: Task) -> TaskResult | None:
        if t.kind == "wait_for":
            await w.send(Heartbeat(task_id=t.task_id, durable=True, seq=1))
            await until(
                "the durable start's acknowledgement",
                _acked(w, t.task_id),
            )
            return failed(t.task_id, "wait_for fails after its durable start")
        return None  # execute parks: the server dies while it runs

    async with running_server(tmp_path) as srv:
        async with (
            RawWorker(srv.address, [PROCEED], durable_then_fail) as w,
            httpx.AsyncClient(base_url=srv.url) as http,
        ):
            await start(http, PROCEED, "proceed")
            await until("execute dispatched", _task_of(w, "execute"))
        srv.kill()
        await srv.restart()

        async def finish(w: RawWorker, t: Task) -> TaskResult | None:
            assert t.kind == "execute" and t.wait_for_failed
            return done(t.task_id)

        async with (
            RawWorker(srv.address, [PROCEED], finish) as w2,
            httpx.AsyncClient(base_url=srv.url) as http,
        ):
            res = await result(http, "proceed")
            # execute never started durably: it runs again at the same attempt
            assert res["status"] == "completed", res
            assert [(t.kind, t.attempt) for t in w2.tasks] == [("execute", 1)]


def _acked(w: RawWorker, task_id: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return any(isinstance(f, HeartbeatAck) and f.task_id == task_id for f in w.frames)

    return probe


def _task_of(w: RawWorker, kind: str, step: str | None = None) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return any(t.kind == kind and (step is None or t.step_type == step) for t in w.tasks)

    return probe


# --------------------------------------------------------------------------- commit holds

HELD = FlowSpec(
    flow_type="Held",
    start_step="Start",
    steps=[
        StepSpec(step_type="Start"),
        StepSpec(step_type="Sleeper", has_wait_for=True),
        StepSpec(
            step_type="Faulty",
            options=StepOptionsSpec(
                execute_retry=RetryPolicySpec(initial_interval_s=0.05, maximum_attempts=3)
            ),
        ),
    ],
    rpcs=[
        RpcSpec(name="txn", is_transactional=True),
        RpcSpec(name="plain"),
    ],
    state=[StateDecl(name="n", kind="attribute")],
)
TIMER_S = 2.0
# how long a write that must wait for the RPC gets to show up too early
TOO_EARLY_S = 3.0


class Held:
    """The ``Held`` Worker: the ``txn`` RPC parks at a gate between its snapshot and result.

    ``txn`` adds 1 to ``n``; a Sleeper (after its Timer) and Faulty (on attempt 2, after
    attempt 1 failed at its gate) add 10 to the ``n`` they read; ``plain`` sets it to 100.
    """

    def __init__(self) -> None:
        self.txn_reached = asyncio.Event()
        self.txn_release = asyncio.Event()
        self.faulty_reached = asyncio.Event()
        self.faulty_release = asyncio.Event()
        self.read: dict[str, int] = {}

    async def handle(self, w: RawWorker, t: Task) -> TaskResult | None:
        n = msgspec.json.decode(t.attributes["n"]) if "n" in t.attributes else 0
        tid = t.task_id
        if t.kind == "rpc" and t.rpc_name == "txn":
            self.read["txn"] = n
            self.txn_reached.set()
            await self.txn_release.wait()
            return TaskResult(task_id=tid, attribute_writes={"n": raw(n + 1)}, rpc_output=raw(n))
        if t.kind == "rpc":
            self.read["plain"] = n
            return TaskResult(task_id=tid, attribute_writes={"n": raw(100)})
        if t.step_type == "Start":
            tag = msgspec.json.decode(t.input) if t.input else ""
            nxt = "Sleeper" if tag.startswith("timer") else "Faulty"
            return TaskResult(
                task_id=tid,
                decision=DecisionSpec(kind="go_to", movements=[Movement(step_type=nxt)]),
            )
        if t.kind == "wait_for":
            return TaskResult(
                task_id=tid,
                wait=WaitSpec(conditions=[ConditionSpec(kind="timer", duration_s=TIMER_S)]),
            )
        if t.step_type == "Faulty" and t.attempt == 1:
            # a heartbeat value makes the failure commit on its own path (not as a result)
            await w.send(Heartbeat(task_id=tid, value=raw("progress"), has_value=True))
            self.faulty_reached.set()
            await self.faulty_release.wait()
            return failed(tid, "the first attempt fails")
        self.read[t.step_type or ""] = n
        return TaskResult(
            task_id=tid, attribute_writes={"n": raw(n + 10)}, decision=DecisionSpec(kind="dead_end")
        )


async def _invoke(http: httpx.AsyncClient, flow_id: str, name: str) -> httpx.Response:
    body = encoder.encode(InvokeRpcRequest(rpc_name=name))
    return await http.post(f"/v1/flows/{flow_id}/rpc", content=body, timeout=DEADLINE_S * 3)


async def _stays_away(what: str, probe: Callable[[], Awaitable[bool]]) -> None:
    """Fail if ``probe`` becomes true within ``TOO_EARLY_S`` (the write must wait)."""
    deadline = time.monotonic() + TOO_EARLY_S
    while time.monotonic() < deadline:
        assert not await probe(), f"{what} inside the transactional RPC's window"
        await asyncio.sleep(0.02)


async def test_a_timer_firing_waits_for_the_transactional_rpc_holding_the_run(
    tmp_path: Path,
) -> None:
    worker = Held()
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [HELD], worker.handle, slots=8) as w,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await start(http, HELD, "timer")
        await until("Sleeper waiting", _task_of(w, "wait_for", "Sleeper"))
        txn = asyncio.create_task(_invoke(http, "timer", "txn"))
        await asyncio.wait_for(worker.txn_reached.wait(), DEADLINE_S)
        # the Timer falls due while the RPC holds the run: its firing must wait
        await _stays_away("the Timer fired", _task_of(w, "execute", "Sleeper"))
        worker.txn_release.set()
        assert (await txn).status_code == 200
        await until("Sleeper ran", _task_of(w, "execute", "Sleeper"))
        await until("Sleeper committed", _committed(http, "timer", "Sleeper-1"))
        assert worker.read == {"txn": 0, "Sleeper": 1}  # the Sleeper saw the RPC's write


async def test_a_step_failure_waits_for_the_transactional_rpc_holding_the_run(
    tmp_path: Path,
) -> None:
    worker = Held()
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [HELD], worker.handle, slots=8) as w,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await start(http, HELD, "fail")
        await asyncio.wait_for(worker.faulty_reached.wait(), DEADLINE_S)
        txn = asyncio.create_task(_invoke(http, "fail", "txn"))
        await asyncio.wait_for(worker.txn_reached.wait(), DEADLINE_S)
        worker.faulty_release.set()  # attempt 1 fails while the RPC holds the run
        retried = _attempt(w, "Faulty", 2)
        await _stays_away("the failure committed and the retry ran", retried)
        worker.txn_release.set()
        assert (await txn).status_code == 200
        await until("Faulty committed", _committed(http, "fail", "Faulty-1"))
        assert worker.read == {"txn": 0, "Faulty": 1}


async def test_a_plain_rpc_commit_waits_for_the_transactional_rpc_holding_the_run(
    tmp_path: Path,
) -> None:
    worker = Held()
    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [HELD], worker.handle, slots=8),
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await start(http, HELD, "plain")
        await until("Faulty running", lambda: _true(worker.faulty_reached.is_set()))
        txn = asyncio.create_task(_invoke(http, "plain", "txn"))
        await asyncio.wait_for(worker.txn_reached.wait(), DEADLINE_S)
        plain = asyncio.create_task(_invoke(http, "plain", "plain"))
        await until("the plain RPC ran", lambda: _true("plain" in worker.read))
        await _stays_away("the plain RPC committed", lambda: _true(plain.done()))
        worker.txn_release.set()
        assert (await txn).status_code == 200
        assert (await plain).status_code == 200
        rpcs = [name for ty, name in await history_types(http, "plain") if ty.startswith("Rpc")]
        assert rpcs == ["txn", "plain"]
        # the plain write landed after the RPC's, not under it: n is 100, never 1
        worker.faulty_release.set()
        await until("Faulty committed", _committed(http, "plain", "Faulty-1"))
        assert worker.read["Faulty"] == 100


async def _true(v: bool) -> bool:
    return v


def _attempt(w: RawWorker, step: str, attempt: int) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return any(t.step_type == step and t.attempt == attempt for t in w.tasks)

    return probe


def _committed(http: httpx.AsyncClient, flow_id: str, eid: str) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return ("StepExecuteCompleted", eid) in await history_types(http, flow_id)

    return probe


# --------------------------------------------------------------------------- committed reads

READS = FlowSpec(
    flow_type="Reads",
    start_step="A",
    steps=[StepSpec(step_type="A")],
    state=[
        StateDecl(name="big", kind="attribute"),
        StateDecl(name="log", kind="attribute_map"),
        StateDecl(name="inbox", kind="channel"),
    ],
)
BIG = "b" * 5000  # above the 2 KiB blob threshold: stored as a blob


async def test_committed_attributes_are_read_without_a_worker(tmp_path: Path) -> None:
    async def write_state(w: RawWorker, t: Task) -> TaskResult | None:
        writes: dict[str, msgspec.Raw | None] = {"big": raw(BIG)}
        writes.update({f"log/{k:03d}": raw(k) for k in range(1, 6)})
        return TaskResult(
            task_id=t.task_id,
            attribute_writes=writes,
            publishes=[Publish(channel="inbox", value=raw("m"))],
            decision=DecisionSpec(kind="dead_end"),
        )

    async with running_server(tmp_path) as srv, httpx.AsyncClient(base_url=srv.url) as http:
        async with RawWorker(srv.address, [READS], write_state):
            await start(http, READS, "reads")
            await until("A committed", _committed(http, "reads", "A-1"))
        # the Worker is gone: committed values are still readable

        async def read(**fields: Any) -> httpx.Response:
            body = encoder.encode(ReadAttributesRequest(**fields))
            return await http.post("/v1/flows/reads/attributes", content=body)

        r = await read(
            names=["big", "log/001", "nothing"],
            ranges=[AttributeRangeSpec(map="log", start="log/003", end="log/005")],
        )
        assert r.status_code == 200, r.text
        got = msgspec.json.decode(r.content, type=AttributeValuesWire)
        assert got.info.status == "running"
        decoded = {k: msgspec.json.decode(v) for k, v in got.values.items()}
        assert decoded == {"big": BIG, "log/001": 1, "log/003": 3, "log/004": 4}
        assert got.channel_sizes == {"inbox": 1}

        r = await read(maps=["log"], ranges=[AttributeRangeSpec(map="log", limit=2)])
        got = msgspec.json.decode(r.content, type=AttributeValuesWire)
        assert sorted(got.values) == [f"log/{k:03d}" for k in range(1, 6)]

        bad_requests: list[tuple[dict[str, Any], str]] = [
            ({"maps": ["big"]}, "declares no AttributeMap 'big'"),
            ({"ranges": [AttributeRangeSpec(map="log", limit=0)]}, "at least 1"),
            ({"ranges": [AttributeRangeSpec(map="log", start="big")]}, "outside AttributeMap"),
        ]
        for bad, message in bad_requests:
            r = await read(**bad)
            assert r.status_code == 400 and message in r.json()["message"], r.text
        r = await http.post("/v1/flows/unknown/attributes", content=b"{}")
        assert r.status_code == 404 and r.json()["code"] == "FLOW_NOT_FOUND"
        r = await http.post("/v1/flows/reads/attributes", content=b'{"names": 3}')
        assert r.status_code == 400 and r.json()["code"] == "BAD_REQUEST"
