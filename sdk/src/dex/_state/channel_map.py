"""ChannelMap: an independent durable FIFO queue per runtime key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from dex._state._common import InstanceLoad, check_name, instance_name
from dex._state.channel import ChannelMessage, _Queue
from dex._waits import ChannelCondition

if TYPE_CHECKING:
    from dex._context import Context

T = TypeVar("T")


class ChannelMap(_Queue, Generic[T]):
    """A family of Channels keyed by runtime strings; each key is its own FIFO queue.

    Every method takes the instance key first; semantics are those of ``Channel``. Keys
    are non-empty strings (any character, ``/`` included); any other key raises
    ``InvalidMapKeyError``.

    Args:
        name: unique, non-empty, without ``/``.
        value_type: the declared message type.

    """

    def __init__(self, name: str, value_type: type[T]) -> None:
        super().__init__(check_name(name, "ChannelMap"), "channel_map", value_type)

    def publish(self, ctx: Context, key: str, value: T) -> None:
        """Stage a message on instance ``key``."""
        self._publish(ctx, instance_name(self.name, key), value)

    def size(self, ctx: Context, key: str) -> int:
        """Pending messages of ``key``, counting staged publishes and deletes."""
        return self._size(ctx, instance_name(self.name, key))

    def pending_messages(self, ctx: Context, key: str) -> list[ChannelMessage[T]]:
        """Pending messages of ``key`` in FIFO order (needs a ChannelMap load).

        Raises:
            ChannelMessagesNotLoadedError: neither the map nor this instance was loaded.

        """
        return self._pending(ctx, instance_name(self.name, key))

    def find_pending_message(
        self, ctx: Context, key: str, message_id: str
    ) -> ChannelMessage[T] | None:
        """Return the pending message with this ID on ``key``, or None (needs a load)."""
        return self._find(ctx, instance_name(self.name, key), message_id)

    def delete(self, ctx: Context, key: str, message_id: str) -> None:
        """Stage the deletion of a pending message of ``key``. RPC handlers only."""
        self._delete(ctx, instance_name(self.name, key), message_id)

    def results(self, ctx: Context, key: str) -> list[T]:
        """Values the satisfied Wait consumed from ``key`` (empty if it did not wait on it)."""
        return self._results(ctx, instance_name(self.name, key))

    def for_one(self, key: str) -> ChannelCondition:
        """Ready with ≥1 message on ``key``; consumes exactly 1."""
        return self._cond(instance_name(self.name, key), "for_one", 1, 1)

    def for_n(self, key: str, n: int) -> ChannelCondition:
        """Ready with ≥n messages on ``key``; consumes exactly n."""
        if n < 1:
            raise ValueError(f"for_n: n must be >= 1, got {n}")
        return self._cond(instance_name(self.name, key), "for_n", n, n)

    def at_least(self, key: str, n: int) -> ChannelCondition:
        """Ready with ≥n messages on ``key``; consumes everything queued then."""
        return self._cond(instance_name(self.name, key), "at_least", n, None)

    def at_most(self, key: str, n: int) -> ChannelCondition:
        """Ready at once; consumes up to n messages of ``key``."""
        return self._cond(instance_name(self.name, key), "at_most", 0, n)

    def for_range(self, key: str, at_least: int, at_most: int) -> ChannelCondition:
        """Ready with ≥at_least messages on ``key``; consumes up to at_most."""
        return self._cond(instance_name(self.name, key), "for_range", at_least, at_most)

    def load(self, key: str) -> InstanceLoad:
        """Return a load request for one instance (``*_load_channel_map_instances``)."""
        return InstanceLoad(
            name=self.name, kind="channel_map", key=key, physical=instance_name(self.name, key)
        )

    def __repr__(self) -> str:
        return f"ChannelMap({self.name!r})"
