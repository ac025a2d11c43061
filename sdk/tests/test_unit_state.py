from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from dex import (
    Attribute,
    AttributeMap,
    AttributeMapNotLoadedError,
    Channel,
    ChannelMap,
    ChannelMessage,
    ChannelMessagesNotLoadedError,
    Context,
    DexError,
    FlowDefinitionError,
    InvalidMapKeyError,
    Registry,
    StartFlowOptions,
    ValueMappingError,
)
from dex._client._defs import encode_initial_attributes
from dex._context import _Invocation
from dex._protocol import ChannelMessageWire, Task
from dex._registry import compile_flow
from dex._state._common import instance_key, instance_name

from .test_unit_definitions import make_flow
from .unit_support import raw, task

Name = Attribute("Name", str)
Score = Attribute("Score", float)
Flag = Attribute("Flag", bool)
Docs = AttributeMap("Docs", str)
Inbox = Channel("Inbox", int)
Replies = ChannelMap("Replies", str)

from dex import PersistenceSchema  # noqa: E402

ENTRY = compile_flow(
    make_flow(schema=PersistenceSchema.of(Name, Score, Flag, Docs, Inbox, Replies), name="Demo"),
    None,
    allow_async=False,
)


def ctx_for(t: Task, kind: Any = "execute") -> tuple[Context, _Invocation]:
    inv = _Invocation(t, kind, declared=ENTRY.declared, codec=ENTRY.codec)
    return Context(inv), inv


def test_attribute_read_your_writes_and_defaults() -> None:
    ctx, inv = ctx_for(task(attributes={"Name": raw("a")}))
    assert Name.get(ctx) == "a"
    assert Score.get(ctx) == 0.0 and Flag.get(ctx) is False
    Name.set(ctx, "b")
    assert Name.get(ctx) == "b"
    Name.delete(ctx)
    assert Name.get(ctx) is None
    Score.set(ctx, 1.5)
    Flag.set(ctx, None)
    assert inv.writes == {"Name": None, "Score": b"1.5", "Flag": None}
    with pytest.raises(ValueMappingError):
        Name.set(ctx, 3)  # type: ignore[arg-type]
    assert Name.lock().physical == "Name"


def test_undeclared_state_is_rejected() -> None:
    ctx, _ = ctx_for(task())
    with pytest.raises(FlowDefinitionError, match="not declared"):
        Attribute("Missing", int).get(ctx)
    with pytest.raises(FlowDefinitionError, match="declared as a attribute"):
        Channel("Name", int).publish(ctx, 1)


def test_attribute_map_loading_rules() -> None:
    key = "a/b c"
    physical = instance_name("Docs", key)
    assert physical == "Docs/a%2Fb%20c"
    ctx, _ = ctx_for(task(attributes={physical: raw("x")}, loaded_map_instances=[physical]))
    assert Docs.get(ctx, key) == "x"
    with pytest.raises(AttributeMapNotLoadedError):
        Docs.get(ctx, "other")
    with pytest.raises(AttributeMapNotLoadedError):
        Docs.get_all_instance_keys(ctx)
    Docs.set(ctx, "other", "y")  # writing needs no load, and makes it readable
    assert Docs.get(ctx, "other") == "y"
    assert Docs.lock(key).physical == physical and Docs.load(key).physical == physical


def test_instance_names_are_the_same_built_anew_or_remembered_and_bad_keys_still_fail() -> None:
    keys = ["plain-key_1.~", "a/b c", "é", "%2F"]
    first = [instance_name("Docs", key) for key in keys]
    assert first == ["Docs/plain-key_1.~", "Docs/a%2Fb%20c", "Docs/%C3%A9", "Docs/%252F"]
    assert [instance_name("Docs", key) for key in keys] == first
    assert instance_name("Other", "a/b c") == "Other/a%2Fb%20c"  # the map is part of the key
    for bad in ["", ["a"], None, 3]:
        with pytest.raises(InvalidMapKeyError):
            instance_name("Docs", bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("key", ["a/b", "/", "x/y/z", "%2F", "é ü", "a" * 300])
def test_start_options_take_every_key_the_attribute_map_takes(key: str) -> None:
    ctx, inv = ctx_for(task())
    Docs.set(ctx, key, "v")
    options = StartFlowOptions().with_attribute_map(Docs, key, "v")
    ((physical, value),) = encode_initial_attributes(Registry([]), options.initial_attributes)
    assert inv.writes == {physical: bytes(value)}
    assert physical.count("/") == 1 and instance_key(physical) == key


@pytest.mark.parametrize("key", ["", None, 7])
def test_start_options_and_maps_refuse_the_same_keys_with_one_error(key: Any) -> None:
    ctx, inv = ctx_for(task())
    message = r"map key of '(Docs|Replies)' must be a non-empty string"
    attempts: list[Callable[[], object]] = [
        lambda: StartFlowOptions().with_attribute_map(Docs, key, "v"),
        lambda: Docs.set(ctx, key, "v"),
        lambda: Docs.delete(ctx, key),
        lambda: Docs.get(ctx, key),
        lambda: Docs.lock(key),
        lambda: Docs.load(key),
        lambda: Replies.publish(ctx, key, "v"),
    ]
    for attempt in attempts:
        with pytest.raises(InvalidMapKeyError, match=message) as info:
            attempt()
        assert isinstance(info.value, DexError) and isinstance(info.value, ValueError)
    assert inv.writes == {} and inv.publishes == []


def test_attribute_map_whole_load_lists_sorted_keys() -> None:
    attrs = {"Docs/b": raw("1"), "Docs/a": raw("2"), "Name": raw("n")}
    ctx, inv = ctx_for(task(attributes=attrs, loaded_maps=["Docs"]))
    assert Docs.get_all_instance_keys(ctx) == ("a", "b")
    Docs.set(ctx, "c/d", "3")
    Docs.delete(ctx, "a")
    assert Docs.get_all_instance_keys(ctx) == ("b", "c/d")
    assert Docs.get_map_size(ctx) == 2
    assert Docs.get(ctx, "zzz") is None
    assert inv.writes == {"Docs/c%2Fd": b'"3"', "Docs/a": None}


def test_channel_publish_size_pending_results() -> None:
    msgs = {"Inbox": [ChannelMessageWire(message_id="m1", value=raw(7))]}
    ctx, inv = ctx_for(
        task(channel_sizes={"Inbox": 1}, pending_messages=msgs, loaded_channels=["Inbox"])
    )
    Inbox.publish(ctx, 8)
    assert Inbox.size(ctx) == 2
    assert Inbox.pending_messages(ctx) == [ChannelMessage("m1", 7)]
    assert Inbox.find_pending_message(ctx, "m1") == ChannelMessage("m1", 7)
    assert Inbox.find_pending_message(ctx, "nope") is None
    assert Inbox.results(ctx) == []
    assert [(p.channel, bytes(p.value)) for p in inv.publishes] == [("Inbox", b"8")]
    with pytest.raises(ValueMappingError):
        Inbox.publish(ctx, "x")  # type: ignore[arg-type]
    bare, _ = ctx_for(task())
    with pytest.raises(ChannelMessagesNotLoadedError):
        Inbox.pending_messages(bare)
    assert Inbox.size(bare) == 0


def test_channel_map_instances() -> None:
    physical = "Replies/k%201"
    msgs = {physical: [ChannelMessageWire(message_id="m", value=raw("v"))]}
    ctx, inv = ctx_for(
        task(pending_messages=msgs, loaded_channels=["Replies"], channel_sizes={physical: 1}),
        kind="rpc",
    )
    assert Replies.pending_messages(ctx, "k 1") == [ChannelMessage("m", "v")]
    assert Replies.pending_messages(ctx, "other") == []
    Replies.delete(ctx, "k 1", "m")
    Replies.publish(ctx, "k 1", "w")
    assert Replies.size(ctx, "k 1") == 1
    assert [(d.channel, d.message_id) for d in inv.deletes] == [(physical, "m")]
    assert Replies.load("k 1").physical == physical
    one, _ = ctx_for(task(loaded_channels=[physical], pending_messages=msgs))
    assert len(Replies.pending_messages(one, "k 1")) == 1
    with pytest.raises(ChannelMessagesNotLoadedError):
        Replies.pending_messages(one, "x")


def test_context_locals_events_and_timers() -> None:
    ctx, inv = ctx_for(task(locals={"a": raw([1])}))
    assert ctx.get_step_execution_local("a", list[int]) == [1]
    assert ctx.get_step_execution_local("missing", int) is None
    ctx.set_step_execution_local("a", [2])
    assert ctx.get_step_execution_local("a", list[int]) == [2]
    ctx.record_event("e")
    with pytest.raises(Exception, match="already recorded"):
        ctx.record_event("e", 1)
    assert not ctx.has_timer_fired() and not ctx.has_timer_fired(3)
    assert not ctx.has_last_heartbeat_value() and ctx.get_last_heartbeat_value(int) is None
    assert ctx.recovery_error is None and ctx.rpc_name is None
    assert [e.name for e in inv.events] == ["e"]
