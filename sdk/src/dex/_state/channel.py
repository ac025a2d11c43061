"""Channel: a durable FIFO queue of messages inside one Flow execution."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from msgspec import Raw

from dex._protocol import ChannelDelete, Publish
from dex._state._common import ChannelLoad, check_name, invocation
from dex._waits import ChannelCondition, channel_bounds
from dex.errors import ChannelMessagesNotLoadedError, DexError

if TYPE_CHECKING:
    from dex._context import Context, _Invocation

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ChannelMessage(Generic[T]):
    """A pending Channel message: its server-assigned ID and decoded value."""

    message_id: str
    value: T


class _Queue:
    """Operations on one physical queue; shared by Channel and ChannelMap."""

    def __init__(
        self, name: str, kind: Literal["channel", "channel_map"], value_type: object
    ) -> None:
        self.name = name
        self.kind: Literal["channel", "channel_map"] = kind
        self.value_type: Any = value_type

    def _inv(self, ctx: Context) -> _Invocation:
        return invocation(ctx, self, self.kind)

    def _publish(self, ctx: Context, physical: str, value: object) -> None:
        inv = self._inv(ctx)
        data = inv.codec(self.value_type).encode(value)
        inv.publishes.append(Publish(channel=physical, value=Raw(data)))

    def _size(self, ctx: Context, physical: str) -> int:
        inv = self._inv(ctx)
        n = inv.task.channel_sizes.get(physical, 0)
        n += sum(1 for p in inv.publishes if p.channel == physical)
        n -= sum(1 for d in inv.deletes if d.channel == physical)
        return max(n, 0)

    def _pending(self, ctx: Context, physical: str) -> list[ChannelMessage[Any]]:
        inv = self._inv(ctx)
        loaded = inv.task.loaded_channels
        if physical not in loaded and self.name not in loaded:
            raise ChannelMessagesNotLoadedError(
                f"pending messages of {self.kind} {physical!r} were not loaded; declare them "
                f"with load_channels / load_channel_maps / load_channel_map_instances"
            )
        codec = inv.codec(self.value_type)
        return [
            ChannelMessage(m.message_id, codec.decode(bytes(m.value)))
            for m in inv.task.pending_messages.get(physical, ())
        ]

    def _find(self, ctx: Context, physical: str, message_id: str) -> ChannelMessage[Any] | None:
        for m in self._pending(ctx, physical):
            if m.message_id == message_id:
                return m
        return None

    def _delete(self, ctx: Context, physical: str, message_id: str) -> None:
        inv = self._inv(ctx)
        if inv.kind != "rpc":
            raise DexError("Channel messages can only be deleted from an RPC handler")
        inv.deletes.append(ChannelDelete(channel=physical, message_id=message_id))

    def _results(self, ctx: Context, physical: str) -> list[Any]:
        inv = self._inv(ctx)
        results = inv.task.condition_results
        if results is None:
            return []
        codec = inv.codec(self.value_type)
        out: list[Any] = []
        for name, values in zip(results.channel_names, results.channel_values, strict=False):
            if name == physical:
                out.extend(codec.decode(bytes(v)) for v in values)
        return out

    def _cond(
        self, physical: str, kind: str, lo: int, hi: int | None, condition_id: str | None
    ) -> ChannelCondition:
        lo, hi = channel_bounds(kind, lo, hi)
        if condition_id is not None and not isinstance(condition_id, str):
            raise TypeError(f"{kind}: condition_id must be a str or None, got {condition_id!r}")
        return ChannelCondition(
            name=self.name,
            kind=self.kind,
            channel=physical,
            min_count=lo,
            max_count=hi,
            condition_id=condition_id,
        )

    def _range(
        self, physical: str, at_least: int | None, at_most: int | None, condition_id: str | None
    ) -> ChannelCondition:
        if at_least is None and at_most is None:
            raise ValueError("for_range: give at_least, at_most or both")
        return self._cond(
            physical, "for_range", 0 if at_least is None else at_least, at_most, condition_id
        )

    def _instances(self, context: Context) -> tuple[str, ...]:
        """Physical names of this map's non-empty instances, counting staged changes."""
        inv = self._inv(context)
        prefix = self.name + "/"
        names = {n for n in inv.task.channel_sizes if n.startswith(prefix)}
        names.update(p.channel for p in inv.publishes if p.channel.startswith(prefix))
        names.update(d.channel for d in inv.deletes if d.channel.startswith(prefix))
        return tuple(sorted(n for n in names if self._size(context, n) > 0))


class Channel(_Queue, Generic[T]):
    """A durable FIFO queue of ``T`` messages, declared in the persistence schema.

    Publish from Steps and RPCs (staged, appended when the handler's result commits);
    consume only through Wait conditions (``for_one()``, ``for_n(count)``, ...), after which
    ``execute`` reads the consumed values with ``results(context)``. A message goes to exactly
    one waiting Step execution; messages published before anyone waits stay queued.

    Args:
        name: unique, non-empty, without ``/``.
        value_type: the declared message type.

    """

    def __init__(self, name: str, value_type: type[T]) -> None:
        super().__init__(check_name(name, "Channel"), "channel", value_type)

    def publish(self, context: Context, value: T) -> None:
        """Stage a message (ValueMappingError on a type mismatch)."""
        self._publish(context, self.name, value)

    def size(self, context: Context) -> int:
        """Pending messages, counting this invocation's staged publishes and deletes."""
        return self._size(context, self.name)

    def pending_messages(self, context: Context) -> list[ChannelMessage[T]]:
        """Pending messages in FIFO order (snapshot; needs ``load_channels``).

        Raises:
            ChannelMessagesNotLoadedError: the method or RPC did not load this Channel.

        """
        return self._pending(context, self.name)

    def find_pending_message(self, context: Context, message_id: str) -> ChannelMessage[T] | None:
        """Return the pending message with this ID, or None (needs a load)."""
        return self._find(context, self.name, message_id)

    def delete(self, context: Context, message_id: str) -> None:
        """Stage the deletion of a pending message. RPC handlers only (DexError elsewhere)."""
        self._delete(context, self.name, message_id)

    def results(self, context: Context) -> list[T]:
        """Values the satisfied Wait consumed from this Channel (empty if it did not wait)."""
        return self._results(context, self.name)

    # Every condition factory takes ``condition_id``: an optional name of the condition,
    # unique in its Wait (condition combinations refer to conditions by it).

    def for_one(self, *, condition_id: str | None = None) -> ChannelCondition:
        """Ready with ≥1 message; consumes exactly 1."""
        return self._cond(self.name, "for_one", 1, 1, condition_id)

    def for_n(self, count: int, *, condition_id: str | None = None) -> ChannelCondition:
        """Ready with ≥count messages; consumes exactly count (count ≥ 1).

        Raises:
            ValueError: ``count < 1``.

        """
        if count < 1:
            raise ValueError(f"for_n: count must be >= 1, got {count}")
        return self._cond(self.name, "for_n", count, count, condition_id)

    def at_least(self, count: int, *, condition_id: str | None = None) -> ChannelCondition:
        """Ready with ≥count messages; consumes everything queued at that moment."""
        return self._cond(self.name, "at_least", count, None, condition_id)

    def at_most(self, count: int, *, condition_id: str | None = None) -> ChannelCondition:
        """Ready at once; consumes up to count queued messages (possibly none)."""
        return self._cond(self.name, "at_most", 0, count, condition_id)

    def for_range(
        self,
        at_least: int | None = None,
        at_most: int | None = None,
        *,
        condition_id: str | None = None,
    ) -> ChannelCondition:
        """Ready with ≥at_least messages; consumes up to at_most.

        ``at_least=None`` means 0 (ready at once); ``at_most=None`` consumes everything
        queued when it is ready.

        Raises:
            ValueError: both bounds are None, or the bounds are invalid.

        """
        return self._range(self.name, at_least, at_most, condition_id)

    def load(self) -> ChannelLoad:
        """Return a load request for this Channel's pending messages."""
        return ChannelLoad(name=self.name)

    def __repr__(self) -> str:
        return f"Channel({self.name!r})"
