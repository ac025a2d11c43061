"""StreamHub: resume tokens after trimming, and reads from any point of a long Stream."""

from __future__ import annotations

import msgspec
from dex_server.dispatch._streams import StreamHub

KEY = ("F", "s", "f-1")


def _value(n: int) -> bytes:
    return msgspec.json.encode(n)


async def test_read_next_returns_the_message_after_any_token() -> None:
    hub = StreamHub()
    for n in range(1, 101):
        hub.write(KEY, 10_000, _value(n), "step")
    for token in (0, 1, 50, 99):
        message = await hub.read_next(KEY, 10_000, str(token), 0.0)
        assert message is not None
        assert message.resume_token == str(token + 1)
        assert msgspec.json.decode(message.value) == token + 1
    assert await hub.read_next(KEY, 10_000, "100", 0.0) is None


async def test_a_token_older_than_the_trimmed_start_gets_the_oldest_retained() -> None:
    hub = StreamHub()
    for n in range(1, 101):
        hub.write(KEY, 10, _value(n), "step")  # 97..100 fit in 10 bytes
    oldest = await hub.read_next(KEY, 10, "3", 0.0)
    assert oldest is not None and oldest.resume_token == "97"
    newer = await hub.read_next(KEY, 10, "97", 0.0)
    assert newer is not None and newer.resume_token == "98"
