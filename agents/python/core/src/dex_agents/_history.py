"""Reading the session's messages without loading the whole ``AgentMessages`` map.

Stored messages are immutable: sequence ``n`` of a run never changes once committed. So
each Worker keeps the messages it has read, per session run, and a model call asks the
server (``AttributeMap.load_range``) only for the sequences it has not seen yet; the RPCs
read just the keys they return. Only committed values enter the cache (never this
attempt's own staged writes), so a failed attempt leaves nothing behind.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from dex import Context
from dex.errors import AttributeMapNotLoadedError

from dex_agents._persistence import persistence
from dex_agents._records import AgentMessage
from dex_agents._text import SEQUENCE_KEY_DIGITS, message_sequence_key

_MAX_SESSIONS = 256
_MAX_MESSAGES = 200_000  # across every cached session of this process
_KEY_LIMIT = 10**SEQUENCE_KEY_DIGITS


def sequence_key_or_end(sequence: int) -> str | None:
    """The key of ``sequence``, or None (the map's end) past the last possible key."""
    return message_sequence_key(sequence) if sequence < _KEY_LIMIT else None


class MessageCache:
    """Per-process cache of each session run's messages, oldest first (a prefix 1..n).

    Bounded by sessions and by total messages (least recently used sessions go first).
    Safe to use from several event loops and threads. A session's messages are a tuple,
    handed out as is: a model call then costs no copy of the whole history (at 5,000
    messages, copies of it were most of what a turn's Worker time grew by).
    """

    def __init__(self, max_sessions: int = _MAX_SESSIONS, max_messages: int = _MAX_MESSAGES):
        self._max_sessions = max_sessions
        self._max_messages = max_messages
        self._sessions: OrderedDict[tuple[str, str], tuple[AgentMessage, ...]] = OrderedDict()
        self._count = 0
        self._lock = threading.Lock()
        self.fetched = 0  # messages read from the server (for tests and tuning)

    def prefix(self, session: tuple[str, str]) -> tuple[AgentMessage, ...]:
        with self._lock:
            cached = self._sessions.get(session)
            if cached is None:
                return ()
            self._sessions.move_to_end(session)
            return cached

    def store(self, session: tuple[str, str], messages: tuple[AgentMessage, ...]) -> None:
        with self._lock:
            old = self._sessions.pop(session, None)
            self._count -= len(old) if old is not None else 0
            if len(messages) > self._max_messages:
                return
            self._sessions[session] = messages
            self._count += len(messages)
            while len(self._sessions) > self._max_sessions or self._count > self._max_messages:
                _, dropped = self._sessions.popitem(last=False)
                self._count -= len(dropped)

    def clear(self) -> None:
        with self._lock:
            self._sessions.clear()
            self._count = 0


MESSAGE_CACHE = MessageCache()


async def session_messages(ctx: Context, count: int) -> tuple[AgentMessage, ...]:
    """Messages ``1..count`` of this session run in sequence order, fetching only new ones.

    ``count`` is ``AgentState.message_count`` of the task's snapshot. Falls back to one
    full read when the cached prefix and the store disagree (a gap in the sequence).
    """
    session = (ctx.flow_id, ctx.run_id)
    known = MESSAGE_CACHE.prefix(session)[:count]  # a tuple's slice to its end is itself
    if len(known) < count:
        # The newest messages may have come with the task (first_model_call's loads):
        # only the gap between the cache and them is read from the server.
        preloaded = _preloaded_tail(ctx, len(known) + 1, count)
        last = count - len(preloaded)
        rows = []
        if last > len(known):
            rows = await persistence.AgentMessages.load_range(
                ctx, message_sequence_key(len(known) + 1), sequence_key_or_end(last + 1)
            )
        fresh = [message for _, message in rows] + preloaded
        MESSAGE_CACHE.fetched += len(fresh)
        expected = range(len(known) + 1, len(known) + 1 + len(fresh))
        if [m.sequence for m in fresh] != list(expected):
            rows = await persistence.AgentMessages.load_range(
                ctx, None, sequence_key_or_end(count + 1)
            )
            known = tuple(message for _, message in rows)
            if [m.sequence for m in known] == list(range(1, len(known) + 1)):
                MESSAGE_CACHE.store(session, known)
            return known
        # The cached prefix is 1..len(known) and ``fresh`` was checked to follow it, so
        # only the new messages are checked: the cost does not grow with the session.
        known = (*known, *fresh)
        MESSAGE_CACHE.store(session, known)
    return known


def _preloaded_tail(ctx: Context, first: int, last: int) -> list[AgentMessage]:
    """The loaded messages ``n..last`` for the smallest ``n >= first`` they reach, in order."""
    tail: list[AgentMessage] = []
    for sequence in range(last, first - 1, -1):
        try:
            message = persistence.AgentMessages.get(ctx, message_sequence_key(sequence))
        except AttributeMapNotLoadedError:
            break
        if message is None or message.sequence != sequence:
            break
        tail.append(message)
    tail.reverse()
    return tail


async def read_messages(ctx: Context, first: int, last: int) -> list[AgentMessage]:
    """Stored messages with ``first <= sequence <= last``, oldest first (only those keys)."""
    if last < first or first >= _KEY_LIMIT:
        return []
    rows = await persistence.AgentMessages.load_range(
        ctx, message_sequence_key(max(first, 1)), sequence_key_or_end(last + 1)
    )
    return [message for _, message in rows]
