from __future__ import annotations

from dex_agents._enums import MessageRole
from dex_agents._history import MessageCache
from dex_agents._records import AgentMessage


def _messages(n: int, first: int = 1) -> tuple[AgentMessage, ...]:
    return tuple(
        AgentMessage(sequence=s, turn_id="turn-1", role=MessageRole.USER, text=f"m{s}")
        for s in range(first, first + n)
    )


def test_a_session_s_messages_are_handed_out_as_stored_without_a_copy() -> None:
    cache = MessageCache()
    session = ("flow", "run")
    assert cache.prefix(session) == ()
    stored = _messages(5_000)
    cache.store(session, stored)
    # every model call of a long session reads the same immutable history, uncopied
    assert cache.prefix(session) is stored
    assert cache.prefix(session) is cache.prefix(session)
    grown = (*stored, *_messages(2, first=5_001))
    cache.store(session, grown)
    assert [m.sequence for m in cache.prefix(session)] == list(range(1, 5_003))


def test_the_cache_still_drops_least_recently_used_sessions_past_its_bounds() -> None:
    cache = MessageCache(max_sessions=2, max_messages=10)
    cache.store(("f", "a"), _messages(4))
    cache.store(("f", "b"), _messages(4))
    assert len(cache.prefix(("f", "a"))) == 4  # now the most recently used
    cache.store(("f", "c"), _messages(4))  # 12 messages: the oldest session goes
    assert cache.prefix(("f", "b")) == ()
    assert len(cache.prefix(("f", "a"))) == 4 and len(cache.prefix(("f", "c"))) == 4
    cache.store(("f", "d"), _messages(11))  # larger than the whole cache: not kept
    assert cache.prefix(("f", "d")) == ()
