"""On-demand state reads (``ReadState`` / ``StateValues``) through a raw Worker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import msgspec
from dex._protocol import (
    DecisionSpec,
    ErrorCode,
    FlowSpec,
    Movement,
    ReadState,
    StartFlowRequest,
    StateDecl,
    StateValues,
    StepSpec,
    Task,
    TaskResult,
    encoder,
)
from dex_server.store import SqliteStore, StoredValue, Tx
from dex_server.testing import running_server

from tests._rawworker import RawWorker, raw

SPEC = FlowSpec(
    flow_type="Reader",
    start_step="Fill",
    steps=[StepSpec(step_type="Fill"), StepSpec(step_type="Read")],
    state=[
        StateDecl(name="log", kind="attribute_map"),
        StateDecl(name="log2", kind="attribute_map"),
        StateDecl(name="single", kind="attribute"),
    ],
)
BIG = "x" * 5000  # above the 2 KiB blob threshold: travels as a blob reference


async def ask(w: RawWorker, frame: ReadState) -> StateValues:
    """Send one read and wait (with a deadline) for its answer."""
    await w.send(frame)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for f in w.frames:
            if isinstance(f, StateValues) and f.request_id == frame.request_id:
                return f
        await asyncio.sleep(0.01)
    raise AssertionError(f"no answer to read {frame.request_id}")


async def test_reads_are_scoped_to_the_running_task_and_declared_maps(tmp_path: Path) -> None:
    answers: dict[str, StateValues] = {}
    finished: list[str] = []

    async def handler(w: RawWorker, t: Task) -> TaskResult | None:
        if t.step_type == "Fill":
            writes: dict[str, msgspec.Raw | None] = {
                f"log/000{i}": raw(f"v{i}") for i in range(1, 5)
            }
            writes["log/0005"] = raw(BIG)
            writes["log2/0001"] = raw("other map")
            writes["single"] = raw(1)
            return TaskResult(
                task_id=t.task_id,
                attribute_writes=writes,
                decision=DecisionSpec(kind="go_to", movements=[Movement(step_type="Read")]),
            )
        assert t.attributes.keys() == {"single"}  # nothing of the maps was loaded up front

        def read(n: int, **kw: object) -> ReadState:
            return ReadState(task_id=t.task_id, request_id=n, **kw)  # type: ignore[arg-type]

        answers["all"] = await ask(w, read(1, map="log"))
        answers["range"] = await ask(w, read(2, map="log", start="log/0002", end="log/0004"))
        answers["limit"] = await ask(w, read(3, map="log", start="log/0003", limit=1))
        answers["names"] = await ask(w, read(4, map="log", names=["log/0004", "log/0009"]))
        answers["undeclared"] = await ask(w, read(5, map="nope"))
        answers["outside"] = await ask(w, read(6, map="log", names=["log2/0001"]))
        answers["bad_limit"] = await ask(w, read(7, map="log", limit=0))
        finished.append(t.task_id)
        return TaskResult(task_id=t.task_id, decision=DecisionSpec(kind="graceful_complete"))

    async with (
        running_server(tmp_path) as srv,
        RawWorker(srv.address, [SPEC], handler) as worker,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        body = encoder.encode(StartFlowRequest(flow_type="Reader", flow_id="r1", spec=SPEC))
        assert (await http.post("/v1/flows", content=body)).status_code == 200
        result = (await http.get("/v1/flows/r1/result", params={"timeout_s": 10})).json()
        assert result["status"] == "completed", result

        every = answers["all"]
        assert every.error_code is None
        assert every.names == [f"log/000{i}" for i in range(1, 6)]
        assert {n: bytes(v) for n, v in every.values.items()} == {
            f"log/000{i}": f'"v{i}"'.encode() for i in range(1, 5)
        }
        assert list(every.blob_refs) == ["log/0005"]
        blob = await http.get(f"/v1/blobs/{every.blob_refs['log/0005']}")
        assert blob.content == f'"{BIG}"'.encode()

        assert answers["range"].names == ["log/0002", "log/0003"]
        assert answers["limit"].names == ["log/0003"]
        assert answers["names"].names == ["log/0004"]
        assert bytes(answers["names"].values["log/0004"]) == b'"v4"'
        assert answers["undeclared"].error_code == ErrorCode.BAD_REQUEST
        assert answers["outside"].error_code == ErrorCode.BAD_REQUEST
        assert answers["bad_limit"].error_code == ErrorCode.BAD_REQUEST
        assert not answers["outside"].values

        # the task finished: its reads are refused
        late = await ask(worker, ReadState(task_id=finished[0], request_id=99, map="log"))
        assert late.error_code == ErrorCode.FLOW_NOT_ACTIVE
        assert not late.names


async def test_store_range_read_stays_inside_its_map(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "direct.sqlite3", fsync=False)
    store.open()
    try:

        def fill(tx: Tx) -> None:
            for name in ("m/a", "m/b", "m/c", "m0", "m2/a", "l/z"):
                tx.state.write("run", name, StoredValue(value=raw(name), size=4))

        await store.run(fill)
        got = await store.read(lambda tx: tx.state.of_range("run", "m", None, None, None))
        assert [n for n, _ in got] == ["m/a", "m/b", "m/c"]
        got = await store.read(lambda tx: tx.state.of_range("run", "m", "m/b", None, 5))
        assert [n for n, _ in got] == ["m/b", "m/c"]
        got = await store.read(lambda tx: tx.state.of_range("run", "m", "a", "z", None))
        assert [n for n, _ in got] == ["m/a", "m/b", "m/c"]
        got = await store.read(lambda tx: tx.state.of_range("other", "m", None, None, None))
        assert got == []
    finally:
        await store.close()
