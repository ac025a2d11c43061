"""StreamHub: resume tokens after trimming, after a restart, and from any point of a long Stream."""

from __future__ import annotations

import msgspec
from dex_server.dispatch._streams import StreamHub, clock_base

KEY = ("F", "s", "f-1")


def _value(n: int) -> bytes:
    return msgspec.json.encode(n)


async def test_read_next_returns_the_message_after_any_token() -> None:
    hub = StreamHub(token_base=lambda: 0)
    for n in range(1, 101):
        hub.write(KEY, 10_000, _value(n), "step")
    for token in (0, 1, 50, 99):
        message = await hub.read_next(KEY, 10_000, str(token), 0.0)
        assert message is not None
        assert message.resume_token == str(token + 1)
        assert msgspec.json.decode(message.value) == token + 1
    assert await hub.read_next(KEY, 10_000, "100", 0.0) is None


async def test_a_token_older_than_the_trimmed_start_gets_the_oldest_retained() -> None:
    hub = StreamHub(token_base=lambda: 0)
    for n in range(1, 101):
        hub.write(KEY, 10, _value(n), "step")  # 97..100 fit in 10 bytes
    oldest = await hub.read_next(KEY, 10, "3", 0.0)
    assert oldest is not None and oldest.resume_token == "97"
    newer = await hub.read_next(KEY, 10, "97", 0.0)
    assert newer is not None and newer.resume_token == "98"


async def test_a_token_from_before_a_restart_gets_what_was_written_since() -> None:
    before = StreamHub()
    for n in range(1, 51):
        before.write(KEY, 10_000, _value(n), "step")
    last = await before.read_batch(KEY, 10_000, "", 0.0, 100)
    assert [msgspec.json.decode(m.value) for m in last] == list(range(1, 51))
    token = last[-1].resume_token
    assert int(token) >= clock_base() - 60_000_000  # numbered from the clock, not from 1

    after = StreamHub()  # the restarted server's Streams start empty
    after.write(KEY, 10_000, _value(1001), "step")
    after.write(KEY, 10_000, _value(1002), "step")
    resumed = await after.read_batch(KEY, 10_000, token, 0.0, 100)
    assert [msgspec.json.decode(m.value) for m in resumed] == [1001, 1002]
    assert all(int(m.resume_token) > int(token) for m in resumed)
    nxt = await after.read_next(KEY, 10_000, resumed[0].resume_token, 0.0)
    assert nxt is not None and msgspec.json.decode(nxt.value) == 1002
    assert await after.read_next(KEY, 10_000, resumed[1].resume_token, 0.0) is None


async def test_a_token_above_every_number_given_out_reads_from_the_oldest() -> None:
    # a restarted server whose clock was set back numbers below the old tokens
    hub = StreamHub(token_base=lambda: 1000)
    hub.write(KEY, 10_000, _value(1), "step")
    hub.write(KEY, 10_000, _value(2), "step")
    got = await hub.read_batch(KEY, 10_000, "5000", 0.0, 100)
    assert [m.resume_token for m in got] == ["1001", "1002"]
    assert await hub.read_next(KEY, 10_000, "1002", 0.0) is None
