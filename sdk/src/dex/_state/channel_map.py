"""ChannelMap: an independent durable FIFO queue per runtime key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from dex._state._common import ChannelMapLoad, check_name, instance_key, instance_name
from dex._state.channel import ChannelMessage, _Queue
from dex._waits import ChannelCondition

if TYPE_CHECKING:
    from dex._context import Context

T = TypeVar("T")


class ChannelMap(_Queue, Generic[T]):
    """A family of Channels keyed by runtime strings; each instance is its own FIFO queue.

    Every method takes the instance key first; semantics are those of ``Channel``.
    Instance keys are non-empty strings (any character, ``/`` included); any other key
    raises ``InvalidMapKeyError``.

    Args:
        name: unique, non-empty, without ``/``.
        value_type: the declared message type.

    """

    def __init__(self, name: str, value_type: type[T]) -> None:
        super().__init__(check_name(name, "ChannelMap"), "channel_map", value_type)

    def publish(self, context: Context, instance: str, value: T) -> None:
        """Stage a message on ``instance``."""
        self._publish(context, instance_name(self.name, instance), value)

    def size(self, context: Context, instance: str) -> int:
        """Pending messages of ``instance``, counting staged publishes and deletes."""
        return self._size(context, instance_name(self.name, instance))

    def pending_messages(self, context: Context, instance: str) -> list[ChannelMessage[T]]:
        """Pending messages of ``instance`` in FIFO order (needs a ChannelMap load).

        Raises:
            ChannelMessagesNotLoadedError: neither the map nor this instance was loaded.

        """
        return self._pending(context, instance_name(self.name, instance))

    def find_pending_message(
        self, context: Context, instance: str, message_id: str
    ) -> ChannelMessage[T] | None:
        """Return the pending message with this ID on ``instance``, or None (needs a load)."""
        return self._find(context, instance_name(self.name, instance), message_id)

    def delete(self, context: Context, instance: str, message_id: str) -> None:
        """Stage the deletion of a pending message of ``instance``. RPC handlers only."""
        self._delete(context, instance_name(self.name, instance), message_id)

    def get_all_instance_keys(self, context: Context) -> tuple[str, ...]:
        """Keys of the instances with pending messages, sorted ascending.

        Counts this invocation's staged publishes and deletes, like ``size``. Available in
        every Step method and RPC (instance sizes always travel with the task); no load is
        needed.
        """
        return tuple(instance_key(n) for n in self._instances(context))

    def get_map_size(self, context: Context) -> int:
        """How many instances have pending messages (see :meth:`get_all_instance_keys`)."""
        return len(self._instances(context))

    def results(self, context: Context, instance: str) -> list[T]:
        """Values the satisfied Wait consumed from ``instance`` (empty if it did not wait)."""
        return self._results(context, instance_name(self.name, instance))

    def for_one(self, instance: str, *, condition_id: str | None = None) -> ChannelCondition:
        """Ready with ≥1 message on ``instance``; consumes exactly 1."""
        return self._cond(instance_name(self.name, instance), "for_one", 1, 1, condition_id)

    def for_n(
        self, instance: str, count: int, *, condition_id: str | None = None
    ) -> ChannelCondition:
        """Ready with ≥count messages on ``instance``; consumes exactly count.

        Raises:
            ValueError: ``count < 1``.

        """
        if count < 1:
            raise ValueError(f"for_n: count must be >= 1, got {count}")
        return self._cond(instance_name(self.name, instance), "for_n", count, count, condition_id)

    def at_least(
        self, instance: str, count: int, *, condition_id: str | None = None
    ) -> ChannelCondition:
        """Ready with ≥count messages on ``instance``; consumes everything queued then."""
        return self._cond(instance_name(self.name, instance), "at_least", count, None, condition_id)

    def at_most(
        self, instance: str, count: int, *, condition_id: str | None = None
    ) -> ChannelCondition:
        """Ready at once; consumes up to count messages of ``instance``."""
        return self._cond(instance_name(self.name, instance), "at_most", 0, count, condition_id)

    def for_range(
        self,
        instance: str,
        at_least: int | None = None,
        at_most: int | None = None,
        *,
        condition_id: str | None = None,
    ) -> ChannelCondition:
        """Ready with ≥at_least messages on ``instance``; consumes up to at_most.

        ``at_least=None`` means 0; ``at_most=None`` consumes everything queued.

        Raises:
            ValueError: both bounds are None, or the bounds are invalid.

        """
        return self._range(instance_name(self.name, instance), at_least, at_most, condition_id)

    def load_messages(self, instance: str) -> ChannelMapLoad:
        """Return a load request for one instance's pending messages.

        Pass it in ``*_load_channel_map_instances``.

        Raises:
            InvalidMapKeyError: ``instance`` is not a non-empty string.

        """
        return ChannelMapLoad(self, instance)

    def load(self, instance: str) -> ChannelMapLoad:
        """Same as :meth:`load_messages`."""
        return self.load_messages(instance)

    def __repr__(self) -> str:
        return f"ChannelMap({self.name!r})"
