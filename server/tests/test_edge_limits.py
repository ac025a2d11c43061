"""Connection-level limits against a real server process: header caps, slow clients, caps."""

from __future__ import annotations

import asyncio
import contextlib
import resource
import statistics
import time
from pathlib import Path

import httpx
import msgspec
from dex._protocol import (
    DecisionSpec,
    FlowSpec,
    StartFlowRequest,
    StepSpec,
    Task,
    TaskResult,
    encoder,
)
from dex_server._http import RESERVED_FDS, default_max_connections
from dex_server.testing import running_server

from tests._rawworker import RawWorker, raw


async def _connect(address: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = address.rsplit(":", 1)
    return await asyncio.open_connection(host, int(port))


async def _read_all(reader: asyncio.StreamReader, timeout_s: float) -> bytes:
    """Everything the server sends until it closes the connection (or ``timeout_s``)."""
    data = b""
    with contextlib.suppress(ConnectionError):
        async with asyncio.timeout(timeout_s):
            while chunk := await reader.read(65536):
                data += chunk
    return data


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1]) if response.startswith(b"HTTP/1.1 ") else 0


def _body(response: bytes) -> dict[str, object]:
    out: dict[str, object] = msgspec.json.decode(response.split(b"\r\n\r\n", 1)[1])
    return out


async def _send_huge_header(address: str, total: int) -> tuple[bytes, float]:
    """Send a head with one header of ``total`` bytes; return the answer and its delay."""
    reader, writer = await _connect(address)
    started = time.monotonic()
    writer.write(b"GET /v1/flows HTTP/1.1\r\nHost: x\r\nX-Big: ")

    async def pump() -> None:
        chunk = b"a" * (1 << 20)
        with contextlib.suppress(ConnectionError):
            for _ in range(total >> 20):
                writer.write(chunk)
                await writer.drain()

    sender = asyncio.create_task(pump())
    answer = await _read_all(reader, 30)
    elapsed = time.monotonic() - started
    sender.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await sender
    writer.close()
    return answer, elapsed


async def test_huge_headers_get_431_at_once_and_do_not_stall_others(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, token="t") as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        # 64 MiB took 15 s to refuse and held everyone else up; now the head stops at 64 KiB
        attacks = [asyncio.create_task(_send_huge_header(srv.address, 64 << 20)) for _ in range(4)]
        delays = []
        for _ in range(20):
            t = time.monotonic()
            assert (await http.get("/v1/health")).status_code == 200
            delays.append(time.monotonic() - t)
        for answer, elapsed in await asyncio.gather(*attacks):
            # refused before auth: 431, not 401
            assert _status(answer) == 431, answer[:200]
            assert _body(answer)["code"] == "LIMIT_EXCEEDED"
            assert "max_header_bytes=65536" in str(_body(answer)["message"])
            assert elapsed < 5, elapsed
        assert statistics.median(delays) < 0.5, delays

        reader, writer = await _connect(srv.address)
        headers = b"".join(b"X-%d: v\r\n" % i for i in range(101))
        writer.write(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n")
        answer = await _read_all(reader, 10)
        assert _status(answer) == 431 and "max_header_count=100" in answer.decode()
        writer.close()

        # just under both caps is fine, and a large body in the same packet is no head
        reader, writer = await _connect(srv.address)
        body = encoder.encode({"names": [f"{i}" * 2000 for i in range(100)]})
        head = b"POST /v1/flows/nope/attributes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer t\r\n"
        head += b"".join(b"X-%d: v\r\n" % i for i in range(94))  # 100 headers in all
        head += b"X-Pad: " + b"p" * (64 * 1024 - 2048 - len(head)) + b"\r\n"
        writer.write(head + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = await _read_all(reader, 10)
        assert _status(answer) == 404 and _body(answer)["code"] == "FLOW_NOT_FOUND"
        writer.close()


async def test_slow_and_idle_clients_are_cut_off(tmp_path: Path) -> None:
    async with (
        running_server(
            tmp_path, http_head_timeout_s=1.0, http_body_timeout_s=1.0, http_keep_alive_s=0.5
        ) as srv,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        # an idle connection, a half-sent head and a slowloris that keeps sending
        idle = await _connect(srv.address)
        half = await _connect(srv.address)
        half[1].write(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n")
        loris = await _connect(srv.address)
        loris[1].write(b"GET /v1/health HTTP/1.1\r\n")
        started = time.monotonic()

        async def trickle() -> None:
            with contextlib.suppress(ConnectionError):
                for i in range(100):
                    loris[1].write(b"X-%d: v\r\n" % i)
                    await loris[1].drain()
                    await asyncio.sleep(0.1)  # the attack: one header every 100 ms

        sender = asyncio.create_task(trickle())
        assert await _read_all(idle[0], 10) == b""
        answer = await _read_all(half[0], 10)
        assert _status(answer) == 408 and _body(answer)["code"] == "REQUEST_TIMEOUT"
        answer = await _read_all(loris[0], 10)
        assert _status(answer) == 408
        elapsed = time.monotonic() - started
        assert 0.9 < elapsed < 5, elapsed
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        for _, w in (idle, half, loris):
            w.close()

        # a body that never arrives whole
        reader, writer = await _connect(srv.address)
        writer.write(b"POST /v1/flows HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        started = time.monotonic()
        assert _status(await _read_all(reader, 10)) in (0, 400)
        assert 0.9 < time.monotonic() - started < 5
        writer.close()

        # an idle keep-alive connection is closed after http_keep_alive_s
        reader, writer = await _connect(srv.address)
        writer.write(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        started = time.monotonic()
        answer = await _read_all(reader, 10)
        assert _status(answer) == 200 and time.monotonic() - started < 3
        writer.close()
        assert (await http.get("/v1/health")).status_code == 200


async def test_connection_cap_answers_503_and_recovers(tmp_path: Path) -> None:
    async with running_server(tmp_path, max_connections=20, http_head_timeout_s=2.0) as srv:
        held = [await _connect(srv.address) for _ in range(20)]
        reader, writer = await _connect(srv.address)
        answer = await _read_all(reader, 10)
        assert _status(answer) == 503 and "max_connections=20" in answer.decode()
        writer.close()
        # the idle ones time out, and the server answers again
        for r, w in held:
            assert await _read_all(r, 10) == b""
            w.close()
        async with httpx.AsyncClient(base_url=srv.url) as http:
            assert (await http.get("/v1/health")).status_code == 200


SPEC = FlowSpec(flow_type="Quick", start_step="A", steps=[StepSpec(step_type="A")])


async def done(w: RawWorker, t: Task) -> TaskResult:
    return TaskResult(
        task_id=t.task_id, decision=DecisionSpec(kind="graceful_complete", output=raw("ok"))
    )


async def test_worker_websocket_outlives_the_head_timeout(tmp_path: Path) -> None:
    async with (
        running_server(tmp_path, http_head_timeout_s=0.5, http_body_timeout_s=0.5) as srv,
        RawWorker(srv.address, [SPEC], done) as worker,
        httpx.AsyncClient(base_url=srv.url) as http,
    ):
        await asyncio.sleep(1.5)  # three head timeouts pass on the upgraded connection
        start = StartFlowRequest(flow_type="Quick", flow_id="q", spec=SPEC)
        assert (await http.post("/v1/flows", content=encoder.encode(start))).status_code == 200
        result = (await http.get("/v1/flows/q/result", params={"timeout_s": 20})).json()
        assert result["status"] == "completed" and worker.tasks


def test_default_connection_cap_leaves_room_below_the_file_limit() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        assert default_max_connections() == max(16, soft - RESERVED_FDS)
