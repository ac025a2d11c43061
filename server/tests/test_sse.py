"""Server-Sent Events feeds of Streams and histories, against a real server and Worker.

One server process (with a token, short heartbeats and a small SSE connection limit) and
one Worker child for the module; a ``Ticker`` Flow writes each word it is told to its
``ticks`` Stream. Feeds are read with a plain HTTP client, as any SSE client would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import dex
import httpx
import pytest
import pytest_asyncio
from dex_server.service._changes import Changes
from dex_server.testing import RunningServer, running_server

from tests._sse_flows import Ticker
from tests.test_edge_input import _start

TOKEN = "sse-test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
SERVER_DIR = Path(__file__).resolve().parents[1]
MAX_SSE = 3
TICKER = Ticker()
DEADLINE_S = 20.0

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(120)]


@dataclass
class Env:
    server: RunningServer
    client: dex.AsyncClient
    http: httpx.AsyncClient
    flows: list[str] = field(default_factory=list)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Env]:
    tmp = tmp_path_factory.mktemp("sse")
    token_file = tmp / "token"
    token_file.write_text(TOKEN)
    async with running_server(
        tmp / "server", token=TOKEN, sse_heartbeat_s=0.5, max_sse_connections=MAX_SSE
    ) as srv:
        worker = subprocess.Popen(
            [sys.executable, "-m", "tests._sse_flows", srv.address, str(token_file)],
            cwd=SERVER_DIR,
            stdout=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            assert worker.stdout is not None
            line = await asyncio.wait_for(asyncio.to_thread(worker.stdout.readline), DEADLINE_S)
            assert line.strip() == b"ready"
            client = dex.AsyncClient(
                dex.Registry([TICKER]),
                options=dex.ClientOptions(
                    server_address=srv.address, credential=dex.FileCredential(token_file)
                ),
            )
            async with httpx.AsyncClient(base_url=srv.url, headers=AUTH, timeout=30.0) as http:
                yield Env(srv, client, http)
            await client.close()
        finally:
            worker.kill()
            worker.wait()
            if worker.stdout is not None:
                worker.stdout.close()


@dataclass
class Sse:
    """An open feed: parsed events (``id``, ``event``, ``data``) and comment lines."""

    response: httpx.Response
    lines: AsyncIterator[str]
    comments: int = 0
    ended: bool = False

    async def next(self, timeout_s: float = DEADLINE_S) -> dict[str, str]:
        ev: dict[str, str] = {}
        data: list[str] = []
        async with asyncio.timeout(timeout_s):
            async for line in self.lines:
                if line == "":
                    if data or ev:
                        ev["data"] = "\n".join(data)
                        return ev
                    continue
                if line.startswith(":"):
                    self.comments += 1
                    continue
                name, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if name == "data":
                    data.append(value)
                elif name in ("id", "event"):
                    ev[name] = value
        self.ended = True
        raise EOFError("the feed ended")

    async def messages(self, n: int) -> list[tuple[int, str]]:
        out: list[tuple[int, str]] = []
        while len(out) < n:
            ev = await self.next()
            assert ev.get("event") == "message", ev
            out.append((int(ev["id"]), json.loads(ev["data"])["value"]))
        return out


@contextlib.asynccontextmanager
async def feed(
    http: httpx.AsyncClient, path: str, headers: dict[str, str] | None = None
) -> AsyncIterator[Sse]:
    async with http.stream("GET", path, headers=headers or {}) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        yield Sse(r, r.aiter_lines())


async def _ticker(env: Env, flow_id: str) -> str:
    await env.client.start_flow(TICKER, flow_id)
    return flow_id


def _ticks(flow_id: str) -> str:
    return f"/v1/streams/Ticker/ticks/{flow_id}/events"


async def test_stream_events_resume_with_last_event_id_and_end_with_the_flow(env: Env) -> None:
    fid = await _ticker(env, "sse-resume")
    async with feed(env.http, _ticks(fid)) as sse:
        await env.client.invoke_rpc(TICKER.say, fid, "a b c")
        first = await sse.messages(3)
    assert [v for _, v in first] == ["a", "b", "c"]
    ids = [i for i, _ in first]
    assert ids == sorted(ids) and len(set(ids)) == 3
    # written while no one listened
    await env.client.invoke_rpc(TICKER.say, fid, "d e")
    # the header wins over the query parameter, as a browser's reconnect sends both
    async with feed(
        env.http, _ticks(fid) + f"?after={ids[0]}", {"last-event-id": str(ids[-1])}
    ) as sse:
        missed = await sse.messages(2)
        assert [v for _, v in missed] == ["d", "e"]
        await env.client.invoke_rpc(TICKER.say, fid, "stop")
        assert [v for _, v in await sse.messages(1)] == ["stop"]
        end = await sse.next()
        assert end["event"] == "end"
        assert json.loads(end["data"])["status"] == "completed"
        with pytest.raises(EOFError):
            await sse.next()
    # a closed Flow's feed sends what is left, then the end, at once
    async with feed(env.http, _ticks(fid) + f"?after={ids[1]}") as sse:
        assert [v for _, v in await sse.messages(4)] == ["c", "d", "e", "stop"]
        assert (await sse.next())["event"] == "end"


async def test_a_first_connection_resumes_after_the_query_parameter(env: Env) -> None:
    fid = await _ticker(env, "sse-after")
    async with feed(env.http, _ticks(fid)) as sse:
        await env.client.invoke_rpc(TICKER.say, fid, "one two three")
        got = await sse.messages(3)
    async with feed(env.http, _ticks(fid) + f"?after={got[0][0]}") as sse:
        assert await sse.messages(2) == got[1:]
    # timeout_s=0: what is there now, then the feed ends (no end event: the Flow runs)
    async with feed(env.http, _ticks(fid) + f"?after={got[0][0]}&timeout_s=0") as sse:
        assert await sse.messages(2) == got[1:]
        with pytest.raises(EOFError):
            await sse.next()


async def test_idle_feeds_get_heartbeat_comments(env: Env) -> None:
    fid = await _ticker(env, "sse-idle")
    async with feed(env.http, _ticks(fid)) as sse:
        lines = sse.lines
        async with asyncio.timeout(DEADLINE_S):
            async for line in lines:
                if line.startswith(":"):
                    break
        assert line.startswith(":")


async def test_feeds_need_the_token(env: Env) -> None:
    fid = await _ticker(env, "sse-token")
    async with httpx.AsyncClient(base_url=env.server.url) as anon:
        for path in (_ticks(fid), f"/v1/flows/{fid}/history/events"):
            r = await anon.get(path)
            assert r.status_code == 401
            r = await anon.get(path, headers={"authorization": "Bearer wrong"})
            assert r.status_code == 401


async def test_bad_requests_get_typed_errors(env: Env) -> None:
    fid = await _ticker(env, "sse-bad")
    r = await env.http.get(_ticks(fid), headers={"last-event-id": "x1"})
    assert r.status_code == 400 and "Last-Event-ID" in r.json()["message"]
    r = await env.http.get(_ticks(fid) + "?after=-3")
    assert r.status_code == 400 and "after" in r.json()["message"]
    r = await env.http.get(_ticks("no-such-flow"))
    assert r.status_code == 404 and r.json()["code"] == "FLOW_NOT_FOUND"
    r = await env.http.get(f"/v1/streams/Ticker/nope/{fid}/events")
    assert r.status_code == 400 and "nope" in r.json()["message"]
    r = await env.http.get("/v1/flows/no-such-flow/history/events")
    assert r.status_code == 404


async def test_the_connection_limit_is_enforced_and_named(env: Env) -> None:
    fid = await _ticker(env, "sse-limit")
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(MAX_SSE):
            await stack.enter_async_context(feed(env.http, _ticks(fid)))
        r = await env.http.get(_ticks(fid))
        assert r.status_code == 503
        assert f"max_sse_connections={MAX_SSE}" in r.json()["message"]
    # the closed connections give their slots back (the server sees them leave)
    deadline = time.monotonic() + DEADLINE_S
    while True:
        async with env.http.stream("GET", _ticks(fid)) as r:
            if r.status_code == 200:
                break
        assert time.monotonic() < deadline, "slots were not given back"
        await asyncio.sleep(0.1)


async def test_history_feed_is_live_and_resumable(env: Env) -> None:
    fid = await _ticker(env, "sse-history")
    async with feed(env.http, f"/v1/flows/{fid}/history/events") as sse:
        ev = await sse.next()
        assert ev["event"] == "history" and int(ev["id"]) == json.loads(ev["data"])["event_id"]
        await env.client.invoke_rpc(TICKER.say, fid, "x")
        seen = [int(ev["id"])]
        # new events arrive as they commit: the RPC's Channel message, then its Step
        while len(seen) < 4:
            seen.append(int((await sse.next())["id"]))
    assert seen == sorted(seen)
    await env.client.invoke_rpc(TICKER.say, fid, "stop")
    async with feed(
        env.http, f"/v1/flows/{fid}/history/events", {"last-event-id": str(seen[-1])}
    ) as sse:
        rest: list[int] = []
        while True:
            ev = await sse.next()
            if ev["event"] == "end":
                assert json.loads(ev["data"])["status"] == "completed"
                break
            rest.append(int(ev["id"]))
    page = (await env.http.get(f"/v1/flows/{fid}/history", params={"page_size": 1000})).json()
    all_ids = [e["event_id"] for e in page["events"]]
    assert rest == [i for i in all_ids if i > seen[-1]]
    assert rest and all_ids[-1] == rest[-1]


async def test_a_stopping_server_ends_its_open_feeds_cleanly(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path / "srv") as srv,
        httpx.AsyncClient(base_url=srv.url, timeout=30.0) as http,
    ):
        assert (await http.post("/v1/flows", content=_start("stopping"))).status_code == 200
        async with feed(http, "/v1/flows/stopping/history/events") as sse:
            assert (await sse.next())["event"] == "history"
            stopping = asyncio.ensure_future(srv.stop())
            # the body ends properly (no cut connection), before uvicorn's grace runs out
            with pytest.raises(EOFError):
                while True:
                    await sse.next()
            # a graceful exit: uvicorn re-raises the SIGTERM it handled (never a SIGKILL)
            assert await stopping in (0, -15)


async def test_history_feeds_wake_only_for_their_run_and_leave_no_bookkeeping() -> None:
    changes = Changes()
    with changes.watching("run-a"):
        seen = changes.mark("run-a")
        changes.bump(["run-b"])  # another run: a reader of run-a keeps waiting
        assert changes.mark("run-a") == seen
        assert not await changes.wait_run("run-a", seen, 0.01)
        waiter = asyncio.ensure_future(changes.wait_run("run-a", seen, DEADLINE_S))
        await asyncio.sleep(0)
        changes.bump(["run-b", "run-a"])
        assert await waiter
        seen = changes.mark("run-a")
        changes.bump(None)  # another server's signal: any run may have changed
        assert changes.mark("run-a") != seen
    changes.bump(["run-a"])
    assert changes._runs == {} and changes._watchers == {}
