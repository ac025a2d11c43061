"""Stream writes held for the commit: ``Stream.write(context, value, after_commit=True)``.

A real server and Worker child. A held value travels in the Step's result: it appears only
once that result committed (never for a failed attempt), after the attempt's live writes,
so a reader who sees it also reads the state the Step wrote.
"""

from __future__ import annotations

from pathlib import Path

from dex.errors import LongPollTimeoutError

from tests.e2e_flows import stream_flows
from tests.e2e_flows.harness import Stack, e2e_stack, unique_id
from tests.support import FileGate, async_wait_until


async def _news(stack: Stack, flow_id: str) -> list[tuple[str, str]]:
    """Every retained ``news`` message so far, as (value, source)."""
    out: list[tuple[str, str]] = []
    token = ""
    while True:
        try:
            msg = await stack.client.read_stream(flow_id, stream_flows.NEWS, token, timeout=0.3)
        except LongPollTimeoutError:
            return out
        out.append((msg.value, msg.source))
        token = msg.resume_token


async def test_a_held_write_appears_with_its_commit_and_never_for_a_failed_attempt(
    tmp_path: Path,
) -> None:
    async with e2e_stack(tmp_path) as stack:
        fid = unique_id("held")
        await stack.client.start_flow(stream_flows.ANNOUNCE, fid, fid)
        gate = FileGate(tmp_path, f"{fid}-hold")
        await gate.async_wait_until_reached(timeout=20)

        # attempt 2 is parked before its result: its live write is out, its held one not,
        # and the failed attempt 1's held write is gone for good
        async def live_ones() -> list[tuple[str, str]] | None:
            news = await _news(stack, fid)
            return news if len(news) >= 2 else None

        news = await async_wait_until("both live writes", live_ones, timeout=20)
        assert [v for v, _ in news] == ["live 1", "live 2"]
        assert await stack.client.invoke_rpc(stream_flows.ANNOUNCE.seen, fid) == 0

        gate.release()

        async def announced() -> list[tuple[str, str]] | None:
            news = await _news(stack, fid)
            return news if any(v == "committed 2" for v, _ in news) else None

        await async_wait_until("the held write", announced, timeout=20)
        # seen as soon as it appears: the Step's state is committed already
        assert await stack.client.invoke_rpc(stream_flows.ANNOUNCE.seen, fid) in (2, 10)

        async def all_of_them() -> list[tuple[str, str]] | None:
            news = await _news(stack, fid)
            return news if len(news) >= 5 else None

        news = await async_wait_until("the sync Step's writes", all_of_them, timeout=20)
        # a held write follows the live writes of its attempt, whatever order they were made
        assert news == [
            ("live 1", "#Announce-1"),
            ("live 2", "#Announce-1"),
            ("committed 2", "#Announce-1"),
            ("sync live", "#AnnounceSync-1"),
            ("sync committed", "#AnnounceSync-1"),
        ]
        assert await stack.client.invoke_rpc(stream_flows.ANNOUNCE.seen, fid) == 10
        await stack.client.stop_flow(fid)
