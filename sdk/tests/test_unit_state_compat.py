"""The state handles' shapes from the Dex model: options, locks, loads, schema, conditions."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import FrozenInstanceError
from datetime import timedelta
from typing import Any

import pytest
from dex import (
    AsyncBufferedTextStream,
    AsyncContext,
    Attribute,
    AttributeIndex,
    AttributeLock,
    AttributeMap,
    AttributeMapLoad,
    BufferedTextStream,
    Channel,
    ChannelMap,
    ChannelMapLoad,
    Context,
    FeatureNotAvailableError,
    FlowDefinitionError,
    IndexType,
    InstanceLoad,
    InvalidMapKeyError,
    LockKey,
    PersistenceSchema,
    Stream,
)
from dex._context import _Invocation
from dex._protocol import Publish
from dex._registry import compile_flow
from msgspec import Raw

from tests.support import async_wait_until

from .test_unit_definitions import make_flow
from .unit_support import RecordingIO, task

Count = Attribute("Count", int)
Notes = AttributeMap("Notes", str)
Inbox = Channel("Inbox", int)
Boxes = ChannelMap("Boxes", str)
Text = Stream("Text", str)

ENTRY = compile_flow(
    make_flow(schema=PersistenceSchema.of(Count, Notes, Inbox, Boxes, Text), name="Demo"),
    None,
    allow_async=True,
)


def invocation(kind: Any = "execute", **fields: Any) -> _Invocation:
    return _Invocation(task(**fields), kind, declared=ENTRY.declared, codec=ENTRY.codec)


# --------------------------------------------------------------------------- options


def test_attribute_options_default_to_off_and_keep_their_positions() -> None:
    for handle in (Attribute("a", int), AttributeMap("m", int)):
        assert (handle.index, handle.sync_to_attribute_store, handle.hard_delete_on_null) == (
            None,
            False,
            False,
        )
    params = list(inspect.signature(Attribute).parameters)
    assert params == [
        "name",
        "value_type",
        "index",
        "sync_to_attribute_store",
        "hard_delete_on_null",
    ]
    assert list(inspect.signature(AttributeMap).parameters) == params
    index = AttributeIndex(IndexType.INT)
    positional = Attribute("a", int, index, True)
    assert (positional.index, positional.sync_to_attribute_store) == (index, True)
    assert Attribute("s", str, hard_delete_on_null=True).hard_delete_on_null


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (lambda: Attribute("a", int, hard_delete_on_null=True), TypeError, "not int"),
        (lambda: AttributeMap("m", float, hard_delete_on_null=True), TypeError, "not float"),
        (lambda: Attribute("a", bool, hard_delete_on_null=True), TypeError, "not bool"),
        (
            lambda: Attribute(
                "a", str, AttributeIndex(IndexType.KEYWORD), hard_delete_on_null=True
            ),
            FlowDefinitionError,
            "cannot have an index",
        ),
        (
            lambda: Attribute("a", str, sync_to_attribute_store=True, hard_delete_on_null=True),
            FlowDefinitionError,
            "cannot use sync_to_attribute_store",
        ),
        (lambda: Attribute("a", str, "keyword"), TypeError, "index must be an AttributeIndex"),  # type: ignore[arg-type]
        (lambda: Attribute("a", str, sync_to_attribute_store=1), TypeError, "must be a bool"),  # type: ignore[arg-type]
    ],
)
def test_attribute_options_are_validated_when_declared(
    make: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        make()


@pytest.mark.parametrize(
    ("declaration", "feature"),
    [
        (Attribute("a", int, sync_to_attribute_store=True), "Attribute Store sync"),
        (AttributeMap("m", str, hard_delete_on_null=True), "hard-delete Attributes"),
    ],
)
def test_a_schema_that_asks_for_a_feature_not_built_yet_names_it(
    declaration: Any, feature: str
) -> None:
    builds: list[Callable[[], object]] = [
        lambda: PersistenceSchema.of(declaration),
        lambda: PersistenceSchema(attributes=(declaration,)),
    ]
    for build in builds:
        with pytest.raises(FeatureNotAvailableError, match=feature) as info:
            build()
        assert isinstance(info.value, NotImplementedError)
        assert info.value.feature.startswith(feature)


def test_attribute_index_and_index_type() -> None:
    assert [t.value for t in IndexType] == [
        "keyword",
        "full_text",
        "keyword_array",
        "int",
        "double",
        "bool",
        "datetime",
    ]
    assert AttributeIndex(IndexType.FULL_TEXT) == AttributeIndex(IndexType.FULL_TEXT, "")
    assert AttributeIndex("int").type is IndexType.INT  # type: ignore[arg-type]
    assert AttributeIndex(type=IndexType.BOOL, index_key="Done").index_key == "Done"
    with pytest.raises(ValueError, match="must be an IndexType"):
        AttributeIndex("bogus")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="index_key"):
        AttributeIndex(IndexType.INT, 3)  # type: ignore[arg-type]
    with pytest.raises(FrozenInstanceError):
        AttributeIndex(IndexType.INT).index_key = "x"  # type: ignore[misc]


# --------------------------------------------------------------------------- locks and loads


def test_locks_name_the_handle_and_the_instance() -> None:
    lock = Count.lock()
    assert lock == AttributeLock(Count) == AttributeLock(attribute=Count, instance=None)
    assert (lock.physical, lock.kind, lock.name) == ("Count", "attribute", "Count")
    one = Notes.lock(instance="a b")
    assert one == AttributeLock(Notes, "a b") and hash(one) == hash(AttributeLock(Notes, "a b"))
    assert (one.physical, one.kind, tuple(one)) == ("Notes/a%20b", "attribute_map", (Notes, "a b"))
    assert LockKey is AttributeLock
    with pytest.raises(FlowDefinitionError, match="takes no instance"):
        _ = AttributeLock(Count, "x").physical
    with pytest.raises(FlowDefinitionError, match="needs an instance"):
        _ = AttributeLock(Notes).physical
    with pytest.raises(InvalidMapKeyError):
        Notes.lock("")


def test_map_instance_loads() -> None:
    load = Notes.load(instance="k/1")
    assert (
        load
        == AttributeMapLoad(Notes, "k/1")
        == AttributeMapLoad(attribute_map=Notes, instance="k/1")
    )
    assert (load.physical_name, load.physical, load.key, load.name, load.kind) == (
        "Notes/k%2F1",
        "Notes/k%2F1",
        "k/1",
        "Notes",
        "attribute_map",
    )
    assert tuple(load) == (Notes, "k/1")
    messages = Boxes.load_messages(instance="x")
    assert messages == ChannelMapLoad(Boxes, "x") == Boxes.load("x")
    assert (messages.physical_name, messages.kind, tuple(messages)) == (
        "Boxes/x",
        "channel_map",
        (Boxes, "x"),
    )
    assert isinstance(load, InstanceLoad) and isinstance(messages, InstanceLoad)
    with pytest.raises(InvalidMapKeyError):
        AttributeMapLoad(Notes, "")
    with pytest.raises(InvalidMapKeyError):
        Boxes.load_messages("")


# --------------------------------------------------------------------------- schema


def test_schema_groups_and_declarations() -> None:
    schema = PersistenceSchema.of(Inbox, Count, Text, Notes, Boxes)
    assert schema.attributes == (Count, Notes)
    assert schema.channels == (Inbox, Boxes)
    assert schema.streams == (Text,)
    assert schema.declarations == (Count, Notes, Inbox, Boxes, Text)
    assert schema == PersistenceSchema(
        attributes=(Count, Notes), channels=(Inbox, Boxes), streams=(Text,)
    )
    assert PersistenceSchema() == PersistenceSchema.of()
    assert PersistenceSchema(attributes=[Count]).attributes == (Count,)  # type: ignore[arg-type]
    assert PersistenceSchema.of([Count, Inbox]).declarations == (Count, Inbox)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: PersistenceSchema(attributes=(Inbox,)), "attributes cannot hold"),  # type: ignore[arg-type]
        (lambda: PersistenceSchema(channels=(Count,)), "channels cannot hold"),  # type: ignore[arg-type]
        (lambda: PersistenceSchema(streams=(Inbox,)), "streams cannot hold"),  # type: ignore[arg-type]
        (
            lambda: PersistenceSchema(attributes=(Count,), channels=(Channel("Count", int),)),
            "twice",
        ),
        (lambda: PersistenceSchema.of(Count, 3), "not a state declaration"),  # type: ignore[arg-type]
        (lambda: PersistenceSchema(attributes=Count), "must be a tuple"),  # type: ignore[arg-type]
    ],
)
def test_schema_refuses_misplaced_and_duplicate_declarations(build: Any, message: str) -> None:
    with pytest.raises(FlowDefinitionError, match=message):
        build()


# --------------------------------------------------------------------------- conditions


def test_condition_factories_take_count_and_condition_id() -> None:
    cases = [
        (Inbox.for_one(condition_id="one"), "Inbox", 1, 1, "one"),
        (Inbox.for_n(count=3, condition_id="n"), "Inbox", 3, 3, "n"),
        (Inbox.at_least(count=2), "Inbox", 2, None, None),
        (Inbox.at_most(count=4, condition_id="m"), "Inbox", 0, 4, "m"),
        (Inbox.for_range(at_least=2), "Inbox", 2, None, None),
        (Inbox.for_range(at_most=3), "Inbox", 0, 3, None),
        (Inbox.for_range(at_least=1, at_most=5, condition_id="r"), "Inbox", 1, 5, "r"),
        (Boxes.for_one(instance="k", condition_id="b"), "Boxes/k", 1, 1, "b"),
        (Boxes.for_n(instance="k", count=2), "Boxes/k", 2, 2, None),
        (Boxes.at_least("k", 1, condition_id="l"), "Boxes/k", 1, None, "l"),
        (Boxes.at_most("k", count=2), "Boxes/k", 0, 2, None),
        (Boxes.for_range("k", at_most=2, condition_id="q"), "Boxes/k", 0, 2, "q"),
    ]
    for cond, channel, lo, hi, condition_id in cases:
        spec = cond.to_spec()
        assert (spec.channel, spec.min_count, spec.max_count, spec.condition_id) == (
            channel,
            lo,
            hi,
            condition_id,
        )


def test_condition_factories_refuse_bad_bounds() -> None:
    with pytest.raises(ValueError, match="give at_least, at_most or both"):
        Inbox.for_range()
    with pytest.raises(ValueError, match="give at_least, at_most or both"):
        Boxes.for_range("k")
    with pytest.raises(ValueError, match="count must be >= 1"):
        Inbox.for_n(0)
    with pytest.raises(ValueError, match="invalid bounds"):
        Inbox.for_range(at_least=3, at_most=2)
    with pytest.raises(TypeError, match="condition_id"):
        Inbox.for_one(condition_id=5)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- ChannelMap listing


def test_channel_map_lists_non_empty_instances_with_staged_changes() -> None:
    sizes = {"Boxes/b": 1, "Boxes/a%20z": 2, "Inbox": 4}
    inv = invocation("rpc", channel_sizes=sizes)
    context = Context(inv)
    assert Boxes.get_all_instance_keys(context=context) == ("a z", "b")
    Boxes.publish(context, "c", "new")
    Boxes.delete(context, "b", "m1")
    assert Boxes.get_all_instance_keys(context) == ("a z", "c")
    assert Boxes.get_map_size(context=context) == 2
    assert inv.publishes == [Publish(channel="Boxes/c", value=Raw(b'"new"'))]


# --------------------------------------------------------------------------- buffered text


def test_sync_buffered_text_returns_the_frames_of_each_flush() -> None:
    inv = invocation(step_type="S")
    inv.stream_mode = "frame"
    context = Context(inv)
    buffered = Text.buffered_text(context, max_buffered_bytes=4)
    assert isinstance(buffered, BufferedTextStream)
    assert buffered.write("ab") == ()
    (frame,) = buffered.write("cd")
    assert (frame.stream, frame.value, frame.sent) == ("Text", b'"abcd"', False)
    assert buffered.flush() == ()
    buffered.write("e")
    assert [f.value for f in buffered.flush()] == [b'"e"']
    assert inv.buffers == [buffered]
    with pytest.raises(TypeError, match="str chunks"):
        buffered.write(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="flush_interval must be positive"):
        Text.buffered_text(context, flush_interval=timedelta(0))
    with pytest.raises(ValueError, match="max_buffered_bytes must be positive"):
        BufferedTextStream(Text, context, timedelta(seconds=1), 0)
    assert inspect.signature(Stream.buffered_text).parameters["flush_interval"].default == (
        timedelta(seconds=1)
    )


async def test_async_buffered_text_is_sent_by_its_timer() -> None:
    io = RecordingIO()
    inv = invocation(step_type="S")
    inv.io = io
    inv.loop = asyncio.get_running_loop()
    inv.stream_mode = "direct"
    context = AsyncContext(inv)
    buffered = Text.buffered_text(context=context, flush_interval=timedelta(milliseconds=20))
    assert isinstance(buffered, AsyncBufferedTextStream)
    write: Any = buffered.write  # typed "-> None"; pin that it returns nothing at run time
    assert write("hel") is None
    assert write("lo") is None
    assert io.frames == []

    async def sent() -> list[tuple[Any, ...]] | None:
        return io.frames or None

    assert await async_wait_until("the timer flushed", sent, timeout=5) == [
        ("stream", "Text", b'"hello"')
    ]
